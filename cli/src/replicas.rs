//! `--aggregator` with several replicas. Each replica holds the clusters whose reports hash to it
//! (docs/istio.md, "Sharding the aggregator") and answers 404 for any other, so one replica's 404
//! says nothing: every replica given is asked, and the view comes from those that hold the
//! cluster. Two can hold it for a moment after the ring changes (the old owner keeps its view until
//! it ages out); the newest recompute wins. A replica that cannot be asked only fails the command
//! when no other holds the cluster, since it may have been the owner.

use crate::endpoints;
use serde_json::Value;
use std::collections::BTreeMap;

/// The aggregator's weight and ejection of each endpoint.
pub type Weights = BTreeMap<String, (f64, bool)>;

/// One replica's answer to `GET /v1/weights?cluster=`.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// It holds the cluster: when it last recomputed it, and the weights.
    Holds { computed_at_us: u64, weights: Weights },
    /// 404: another replica owns the cluster (or none does).
    NotHeld,
    /// Unreachable, another status, or a page that does not parse.
    Failed(String),
}

/// What a replica's answer (status and body) says.
pub fn answer(status: u16, body: &str) -> Answer {
    match status {
        200 => match endpoints::parse_weights(body) {
            Ok(weights) => {
                let page: Value = serde_json::from_str(body).unwrap_or_default();
                let computed_at_us = page["clusters"][0]["computed_at_us"].as_u64().unwrap_or(0);
                Answer::Holds { computed_at_us, weights }
            }
            Err(e) => Answer::Failed(e),
        },
        404 => Answer::NotHeld,
        _ => Answer::Failed(format!("{status}: {}", body.trim())),
    }
}

/// The merged view: the weights of the replica that recomputed the cluster last, and a warning
/// for each replica that failed (printed, not fatal, when another holds the cluster).
#[derive(Debug, Clone, PartialEq)]
pub struct Merged {
    pub weights: Weights,
    pub warnings: Vec<String>,
}

/// `answers`: (replica URL, its answer), in the order given. Err when no replica holds `cluster`.
pub fn merge(cluster: &str, answers: &[(String, Answer)]) -> Result<Merged, String> {
    let warnings: Vec<String> = answers
        .iter()
        .filter_map(|(url, a)| match a {
            Answer::Failed(e) => Some(format!("{url}: {e}")),
            _ => None,
        })
        .collect();
    let newest = answers
        .iter()
        .filter_map(|(_, a)| match a {
            Answer::Holds { computed_at_us, weights } => Some((*computed_at_us, weights)),
            _ => None,
        })
        .enumerate()
        // The newest recompute; on a tie, the replica given first.
        .max_by_key(|&(i, (at, _))| (at, std::cmp::Reverse(i)));
    match newest {
        Some((_, (_, weights))) => Ok(Merged { weights: weights.clone(), warnings }),
        None if warnings.is_empty() => {
            Err(format!("--aggregator: none of the {} replicas asked holds {cluster:?} (each answered 404)", answers.len()))
        }
        None => Err(format!(
            "--aggregator: no replica that answered holds {cluster:?}, and the owner may be among those that did not: {}",
            warnings.join("; ")
        )),
    }
}

/// Asks every replica (`bases`: base URLs) for `cluster`, all at once; the answers in the order of
/// `bases`.
pub async fn ask_every_replica(client: &reqwest::Client, bases: &[String], cluster: &str) -> Vec<(String, Answer)> {
    let mut asking = tokio::task::JoinSet::new();
    for (i, base) in bases.iter().enumerate() {
        let (client, base, cluster) = (client.clone(), base.clone(), cluster.to_string());
        asking.spawn(async move { (i, base.clone(), ask(&client, &base, &cluster).await) });
    }
    let mut answers = Vec::with_capacity(bases.len());
    while let Some(joined) = asking.join_next().await {
        match joined {
            Ok(answer) => answers.push(answer),
            Err(e) => answers.push((usize::MAX, String::new(), Answer::Failed(e.to_string()))),
        }
    }
    answers.sort_by_key(|(i, _, _)| *i);
    answers.into_iter().map(|(_, base, a)| (base, a)).collect()
}

async fn ask(client: &reqwest::Client, base: &str, cluster: &str) -> Answer {
    let mut url = match reqwest::Url::parse(&format!("{base}/v1/weights")) {
        Ok(url) => url,
        Err(e) => return Answer::Failed(format!("not a URL: {e}")),
    };
    url.query_pairs_mut().append_pair("cluster", cluster);
    let response = match client.get(url).send().await {
        Ok(r) => r,
        Err(e) => return Answer::Failed(e.to_string()),
    };
    let status = response.status().as_u16();
    match response.text().await {
        Ok(body) => answer(status, &body),
        Err(e) => Answer::Failed(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn page(computed_at_us: u64, weight: f64) -> String {
        serde_json::json!({"clusters": [{"name": "c", "generation": 1, "computed_at_us": computed_at_us,
            "endpoints": [{"address": "10.0.0.1:80", "weight": weight, "ejected": false}]}]})
        .to_string()
    }

    fn holds(computed_at_us: u64, weight: f64) -> Answer {
        answer(200, &page(computed_at_us, weight))
    }

    fn answers(list: Vec<Answer>) -> Vec<(String, Answer)> {
        list.into_iter().enumerate().map(|(i, a)| (format!("http://replica-{i}"), a)).collect()
    }

    #[test]
    fn the_owners_view_whichever_replica_answers_404() {
        for list in [vec![Answer::NotHeld, holds(5, 0.7)], vec![holds(5, 0.7), Answer::NotHeld]] {
            let merged = merge("c", &answers(list)).unwrap();
            assert_eq!(merged.weights["10.0.0.1:80"], (0.7, false));
            assert!(merged.warnings.is_empty());
        }
    }

    #[test]
    fn two_holders_the_newest_recompute_wins() {
        let merged = merge("c", &answers(vec![holds(5, 0.1), holds(9, 0.9), holds(7, 0.5)])).unwrap();
        assert_eq!(merged.weights["10.0.0.1:80"].0, 0.9);
        let tie = merge("c", &answers(vec![holds(5, 0.1), holds(5, 0.9)])).unwrap();
        assert_eq!(tie.weights["10.0.0.1:80"].0, 0.1);
    }

    #[test]
    fn a_failed_replica_is_a_warning_when_another_holds_the_cluster_and_an_error_otherwise() {
        let failed = Answer::Failed("connection refused".into());
        let merged = merge("c", &answers(vec![failed.clone(), holds(5, 0.7)])).unwrap();
        assert_eq!(merged.warnings, vec!["http://replica-0: connection refused".to_string()]);
        let err = merge("c", &answers(vec![failed, Answer::NotHeld])).unwrap_err();
        assert!(err.contains("the owner may be among") && err.contains("connection refused"), "{err}");
        let err = merge("c", &answers(vec![Answer::NotHeld, Answer::NotHeld])).unwrap_err();
        assert!(err.contains("none of the 2 replicas"), "{err}");
    }

    #[test]
    fn answers_from_status_and_body() {
        assert_eq!(answer(404, "cluster: \"c\" is not tracked"), Answer::NotHeld);
        assert!(matches!(answer(503, "busy"), Answer::Failed(e) if e == "503: busy"));
        assert!(matches!(answer(200, "not json"), Answer::Failed(_)));
        assert!(matches!(holds(42, 0.5), Answer::Holds { computed_at_us: 42, .. }));
    }

    /// A one-route HTTP server on 127.0.0.1 that answers every request with `status` and `body`
    /// (a task of the test's runtime, gone with it).
    async fn replica(status: u16, body: String) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let body = body.clone();
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    let head = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = stream.write_all(head.as_bytes()).await;
                    let _ = stream.write_all(body.as_bytes()).await;
                });
            }
        });
        base
    }

    #[tokio::test]
    async fn two_local_replicas_one_owning_in_either_order() {
        let owner = replica(200, page(5, 0.7)).await;
        let other = replica(404, "cluster: \"c\" is not tracked".into()).await;
        let client = reqwest::Client::new();
        for bases in [vec![owner.clone(), other.clone()], vec![other.clone(), owner.clone()]] {
            let asked = ask_every_replica(&client, &bases, "outbound|80||c").await;
            assert_eq!(asked.iter().map(|(b, _)| b.clone()).collect::<Vec<_>>(), bases);
            let merged = merge("outbound|80||c", &asked).unwrap();
            assert_eq!(merged.weights["10.0.0.1:80"], (0.7, false));
            assert!(merged.warnings.is_empty());
        }
        // The owner failing, the other not holding the cluster: an error naming the failure.
        let failing = replica(500, "boom".into()).await;
        let asked = ask_every_replica(&client, &[other, failing], "outbound|80||c").await;
        let err = merge("outbound|80||c", &asked).unwrap_err();
        assert!(err.contains("the owner may be among") && err.contains("500: boom"), "{err}");
    }
}
