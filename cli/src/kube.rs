//! The apiserver, through `kubectl`. The CLI is also `kubectl tailweight`, so kubectl is there
//! wherever it runs, and going through it reads the kubeconfig exactly as kubectl does: contexts,
//! client certificates, tokens, exec credential plugins (EKS, GKE, AKS, OIDC), proxies and the
//! cluster's CA. A client of its own would need TLS and a YAML parser in the static binary and
//! would still miss the exec plugins; kubectl is one child process per list.

use serde_json::Value;
use std::process::Stdio;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// How to reach the apiserver: kubectl's own `--kubeconfig` and `--context` (unset: kubectl's
/// defaults, `$KUBECONFIG` or `~/.kube/config`, and its current context).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Kubectl {
    /// The kubeconfig kubectl reads (default: $KUBECONFIG, else ~/.kube/config).
    #[arg(long, global = true)]
    pub kubeconfig: Option<String>,
    /// The kubeconfig context (default: its current context).
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// The kubectl binary.
    #[arg(long, global = true, env = "TAILWEIGHT_KUBECTL", default_value = "kubectl")]
    pub kubectl: String,
}

impl Kubectl {
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.kubectl);
        if let Some(kubeconfig) = &self.kubeconfig {
            command.arg(format!("--kubeconfig={kubeconfig}"));
        }
        if let Some(context) = &self.context {
            command.arg(format!("--context={context}"));
        }
        command.args(args).stdin(Stdio::null()).kill_on_drop(true);
        command
    }

    /// `kubectl <args>`: its standard output, or its error.
    pub async fn output(&self, args: &[&str]) -> Result<String, String> {
        let output =
            self.command(args).output().await.map_err(|e| format!("{} {}: {e}", self.kubectl, args.join(" ")))?;
        if !output.status.success() {
            return Err(format!(
                "{} {}: {}",
                self.kubectl,
                args.join(" "),
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        String::from_utf8(output.stdout).map_err(|e| format!("{} {}: {e}", self.kubectl, args.join(" ")))
    }

    /// `kubectl <args> -o json`, parsed.
    pub async fn get_json(&self, args: &[&str]) -> Result<Value, String> {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["-o", "json"]);
        let text = self.output(&all).await?;
        serde_json::from_str(&text).map_err(|e| format!("{} {}: not JSON: {e}", self.kubectl, all.join(" ")))
    }

    /// Every object of `resource` in every namespace; `None` when the apiserver does not serve
    /// that resource (its CRD is not installed).
    pub async fn list(&self, resource: &str) -> Result<Option<Vec<Value>>, String> {
        match self.get_json(&["get", resource, "--all-namespaces"]).await {
            Ok(list) => Ok(Some(list["items"].as_array().cloned().unwrap_or_default())),
            Err(e) if e.contains("doesn't have a resource type") => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// One namespaced object.
    pub async fn get(&self, resource: &str, namespace: &str, name: &str) -> Result<Value, String> {
        self.get_json(&["get", resource, name, "--namespace", namespace]).await
    }

    /// `kubectl port-forward pod/<name> :<port>`: the child (killed when dropped) and the local
    /// address it forwards from, once kubectl says so.
    pub async fn port_forward(&self, namespace: &str, pod: &str, port: u16) -> Result<(Child, String), String> {
        let target = format!("pod/{pod}");
        let ports = format!(":{port}");
        let args =
            ["port-forward", "--namespace", namespace, "--address", "127.0.0.1", target.as_str(), ports.as_str()];
        let mut child = self
            .command(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("{} port-forward: {e}", self.kubectl))?;
        let stdout = child.stdout.take().ok_or("kubectl port-forward: no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let first = tokio::time::timeout(std::time::Duration::from_secs(20), lines.next_line()).await;
        match first {
            Ok(Ok(Some(line))) => match forwarded_from(&line) {
                Some(address) => {
                    // Keep reading (and dropping) kubectl's "Handling connection" lines.
                    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
                    Ok((child, address))
                }
                None => Err(format!("kubectl port-forward pod/{pod} -n {namespace}: {line}")),
            },
            _ => {
                let _ = child.start_kill();
                let mut stderr = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = tokio::io::AsyncReadExt::read_to_string(&mut e, &mut stderr).await;
                }
                Err(format!("kubectl port-forward pod/{pod} -n {namespace}: {}", stderr.trim()))
            }
        }
    }
}

/// Every ConfigMap's namespace and name, as objects with that metadata only: their data can be
/// large, and `check` needs the names (and the mesh config's, read by `mesh_configs`).
async fn config_map_names(kubectl: &Kubectl) -> Result<Vec<Value>, String> {
    let columns = "custom-columns=NAMESPACE:.metadata.namespace,NAME:.metadata.name";
    let text = kubectl.output(&["get", "configmaps", "--all-namespaces", "--no-headers", "-o", columns]).await?;
    Ok(text
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let (namespace, name) = (words.next()?, words.next()?);
            Some(serde_json::json!({"metadata": {"namespace": namespace, "name": name}}))
        })
        .collect())
}

/// The mesh config ConfigMaps, whole: `istio`, and `istio-<revision>` for each revision a
/// namespace is labelled with (`istio.io/rev`), in any namespace.
async fn mesh_configs(kubectl: &Kubectl, namespaces: &[Value]) -> Result<Vec<Value>, String> {
    let mut names = vec!["istio".to_string()];
    names.extend(
        namespaces
            .iter()
            .filter_map(|n| n["metadata"]["labels"]["istio.io/rev"].as_str())
            .map(|r| format!("istio-{r}")),
    );
    names.sort();
    names.dedup();
    let mut out = Vec::new();
    for name in names {
        let selector = format!("--field-selector=metadata.name={name}");
        let list = kubectl.get_json(&["get", "configmaps", "--all-namespaces", &selector]).await?;
        out.extend(list["items"].as_array().cloned().unwrap_or_default());
    }
    Ok(out)
}

/// What `tailweight check` reads, listed at once (the mesh configs after the namespaces).
pub async fn snapshot(kubectl: &Kubectl) -> Result<crate::check::Snapshot, String> {
    let required = |r: Result<Option<Vec<Value>>, String>| r.map(Option::unwrap_or_default);
    let (namespaces, pods, services, config_maps) = tokio::join!(
        kubectl.list("namespaces"),
        kubectl.list("pods"),
        kubectl.list("services"),
        config_map_names(kubectl),
    );
    let namespaces = required(namespaces)?;
    let (meshes, wasm_plugins, envoy_filters, destination_rules, sidecars) = tokio::join!(
        mesh_configs(kubectl, &namespaces),
        kubectl.list("wasmplugins.extensions.istio.io"),
        kubectl.list("envoyfilters.networking.istio.io"),
        kubectl.list("destinationrules.networking.istio.io"),
        kubectl.list("sidecars.networking.istio.io"),
    );
    let (service_monitors, pod_monitors, prometheuses, webhooks) = tokio::join!(
        kubectl.list("servicemonitors.monitoring.coreos.com"),
        kubectl.list("podmonitors.monitoring.coreos.com"),
        kubectl.list("prometheuses.monitoring.coreos.com"),
        kubectl.list("mutatingwebhookconfigurations.admissionregistration.k8s.io"),
    );
    let mut config_maps = config_maps?;
    config_maps.extend(meshes?);
    Ok(crate::check::Snapshot {
        namespaces,
        pods: required(pods)?,
        services: required(services)?,
        config_maps,
        wasm_plugins: required(wasm_plugins)?,
        envoy_filters: required(envoy_filters)?,
        destination_rules: required(destination_rules)?,
        sidecars: required(sidecars)?,
        service_monitors: service_monitors?,
        pod_monitors: pod_monitors?,
        prometheuses: prometheuses?,
        // Cluster-scoped, and not every user may read them: without them the injection checks guess.
        webhooks: webhooks.ok().flatten(),
    })
}

/// The local address in kubectl's `Forwarding from 127.0.0.1:40123 -> 15000`.
pub fn forwarded_from(line: &str) -> Option<String> {
    let rest = line.trim().strip_prefix("Forwarding from ")?;
    let (address, _) = rest.split_once(" -> ")?;
    Some(address.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in kubectl: a shell script with `body`, in a directory of its own (removed with it).
    struct Fake(Kubectl, std::path::PathBuf);

    impl Drop for Fake {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.1);
        }
    }

    impl std::ops::Deref for Fake {
        type Target = Kubectl;
        fn deref(&self) -> &Kubectl {
            &self.0
        }
    }

    /// Written by a child `sh`, never through a descriptor of this process: a test thread that
    /// forks while this process holds the script open for writing would leave the descriptor in
    /// its child until that child execs, and running the script meanwhile fails with "Text file
    /// busy" (ETXTBSY).
    fn write_executable(path: &std::path::Path, text: &str) {
        use std::io::Write;
        let mut sh = std::process::Command::new("sh")
            .arg("-c")
            .arg(r#"cat > "$1" && chmod 755 "$1""#)
            .arg("sh")
            .arg(path)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        sh.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        assert!(sh.wait().unwrap().success(), "writing {}", path.display());
    }

    fn fake_kubectl(name: &str, body: &str) -> Fake {
        let dir = std::env::temp_dir().join(format!("tw-cli-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("kubectl");
        write_executable(&path, &format!("#!/bin/sh\n{body}\n"));
        let kubectl = Kubectl {
            kubeconfig: Some("/tmp/kc".into()),
            context: Some("prod".into()),
            kubectl: path.to_string_lossy().into_owned(),
        };
        Fake(kubectl, dir)
    }

    #[tokio::test]
    async fn lists_through_kubectl_with_its_kubeconfig_and_context() {
        // It echoes its arguments as the one item's name.
        let kubectl = fake_kubectl("list", r#"printf '{"items":[{"name":"%s"}]}' "$*""#);
        let items = kubectl.list("pods").await.unwrap().unwrap();
        assert_eq!(items[0]["name"], "--kubeconfig=/tmp/kc --context=prod get pods --all-namespaces -o json");
        let missing = fake_kubectl(
            "missing",
            r#"echo 'error: the server doesn'"'"'t have a resource type "prometheuses"' >&2; exit 1"#,
        );
        assert_eq!(missing.list("prometheuses.monitoring.coreos.com").await.unwrap(), None);
        let denied = fake_kubectl("denied", r#"echo 'Error from server (Forbidden): pods is forbidden' >&2; exit 1"#);
        assert!(denied.list("pods").await.unwrap_err().ends_with("pods is forbidden"));
    }

    #[tokio::test]
    async fn port_forward_gives_kubectls_local_address_or_its_error() {
        let forwarding = fake_kubectl(
            "pf",
            r#"case "$*" in *"port-forward --namespace shop --address 127.0.0.1 pod/web-1 :15100"*)
                 echo 'Forwarding from 127.0.0.1:40123 -> 15100'; exec sleep 30;; esac; exit 3"#,
        );
        let (child, address) = forwarding.port_forward("shop", "web-1", 15100).await.unwrap();
        assert_eq!(address, "127.0.0.1:40123");
        drop(child); // killed (kill_on_drop)
        let failing = fake_kubectl("pf-fail", r#"echo 'error: pods "web-2" not found' >&2; exit 1"#);
        let err = failing.port_forward("shop", "web-2", 15000).await.unwrap_err();
        assert!(err.ends_with(r#"error: pods "web-2" not found"#), "{err}");
    }

    #[test]
    fn the_forwarded_address_from_kubectls_line() {
        assert_eq!(forwarded_from("Forwarding from 127.0.0.1:40123 -> 15000\n").as_deref(), Some("127.0.0.1:40123"));
        assert_eq!(forwarded_from("error: unable to forward"), None);
    }
}
