use super::write::write_attestation;
use super::*;
use crate::protocol::VERSION;

fn sample() -> Attestation {
    Attestation {
        version: VERSION,
        cluster: "outbound|8080||shop.prod.svc.cluster.local".into(),
        endpoint: "10.0.0.1:8080".into(),
        incarnation: 7,
        interval_ms: 1000,
        sources: vec![
            SourceCount { principal: "spiffe://cluster.local/ns/prod/sa/frontend".into(), requests: 120, errors: 3 },
            SourceCount { principal: "spiffe://cluster.local/ns/prod/sa/\"odd\"\\name".into(), requests: 1, errors: 0 },
        ],
    }
}

#[test]
fn a_valid_attestation_passes_and_bad_fields_are_named() {
    assert_eq!(sample().validate(), Ok(()));
    let bad = |f: fn(&mut Attestation)| {
        let mut a = sample();
        f(&mut a);
        a.validate().unwrap_err().to_string()
    };
    assert!(bad(|a| a.version = 2).starts_with("version: 2"));
    assert!(bad(|a| a.cluster.clear()).starts_with("cluster:"));
    assert!(bad(|a| a.endpoint = "pod-a".into()).starts_with("endpoint:"));
    assert!(bad(|a| a.interval_ms = 0).starts_with("interval_ms:"));
    assert!(bad(|a| a.sources[1].errors = 2).starts_with("sources[1]:"));
    assert!(bad(|a| a.sources[1].principal.clear()).starts_with("sources[1].principal:"));
    assert!(bad(|a| a.sources[1].principal = a.sources[0].principal.clone()).contains("appears twice"));
    let too_many = |a: &mut Attestation| {
        a.sources =
            (0..=MAX_SOURCES).map(|i| SourceCount { principal: format!("p{i}"), ..Default::default() }).collect()
    };
    assert!(bad(too_many).starts_with("sources: 1025 is more than the limit"));
}

#[cfg(feature = "serde")]
mod read_side {
    use super::*;
    use crate::attest::read::{parse_attestation, AttestationError};

    #[test]
    fn what_the_filter_writes_the_aggregator_reads_back() {
        let a = sample();
        assert_eq!(parse_attestation(&write_attestation(&a)), Ok(a));
        let empty = Attestation { sources: vec![], ..sample() };
        assert_eq!(parse_attestation(&write_attestation(&empty)), Ok(empty));
    }

    #[test]
    fn bodies_are_refused_with_a_reason_and_oversized_ones_before_parsing() {
        let huge = vec![b' '; MAX_ATTESTATION_BYTES + 1];
        assert_eq!(parse_attestation(&huge), Err(AttestationError::TooLarge(MAX_ATTESTATION_BYTES + 1)));
        assert!(matches!(parse_attestation(b"{\"version\":1}"), Err(AttestationError::Malformed(_))));
        assert!(matches!(parse_attestation(b"\xff"), Err(AttestationError::Malformed(_))));
        let mut bad = sample();
        bad.sources[0].errors = 1_000;
        let e = parse_attestation(&write_attestation(&bad)).unwrap_err();
        assert!(e.to_string().starts_with("sources[0]: errors (1000) exceed requests (120)"), "{e}");
        // The largest valid attestation fits the byte bound.
        let longest = Attestation {
            cluster: "c".repeat(crate::protocol::MAX_NAME_LEN),
            endpoint: "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff%4294967295]:65535".into(),
            sources: (0..MAX_SOURCES)
                .map(|i| SourceCount { principal: format!("{i:0>512}"), requests: u64::MAX, errors: u64::MAX })
                .collect(),
            ..sample()
        };
        let body = write_attestation(&longest);
        assert!(body.len() <= MAX_ATTESTATION_BYTES, "{} > {MAX_ATTESTATION_BYTES}", body.len());
        assert_eq!(parse_attestation(&body).map(|a| a.sources.len()), Ok(MAX_SOURCES));
    }
}
