"""The chart's alerting rules (charts/tailweight/files/alerts.yaml, the PrometheusRule of
`alerts.enabled`): valid for Prometheus, each alert firing on the series of its failure and not on
those beside it (`promtool test rules` of e2e/alerts/alerts_test.yaml, from Debian's prometheus
package), over metric names the aggregator and the sidecar really export."""
import re
import subprocess
from pathlib import Path

import yaml

from tailweight_e2e import paths

PROMTOOL = Path("/usr/bin/promtool")
RULES = paths.REPO / "charts" / "tailweight" / "files" / "alerts.yaml"
RULE_TESTS = paths.REPO / "e2e" / "alerts" / "alerts_test.yaml"
ALERTS = {"TailweightAggregatorUnreachable", "TailweightStaleViews", "TailweightNoViewReceived",
          "TailweightReportsRefused", "TailweightBookNearBudget"}


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(PROMTOOL), *args], capture_output=True, text=True, timeout=120)


def test_rules_are_valid_and_their_unit_tests_pass():
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", str(RULE_TESTS))
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_is_tested():
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    assert {r["alert"] for r in rules} == ALERTS
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    firing = {t["alertname"] for test in tests for t in test["alert_rule_test"] if t["exp_alerts"]}
    quiet = {t["alertname"] for test in tests for t in test["alert_rule_test"] if not t["exp_alerts"]}
    assert firing == quiet == ALERTS


def exported_metrics() -> set[str]:
    """The aggregator's Prometheus names, and the sidecar crate's stats as the Wasm shell's
    /stats/prometheus names them (wasmcustom.tailweight.x -> tailweight_x)."""
    aggregator = {m for p in (paths.REPO / "aggregator" / "src").rglob("*.rs")
                  for m in re.findall(r'"(tailweight_[a-z_]+)"', p.read_text())}
    filter_stats = {m for p in (paths.REPO / "sidecar" / "src").rglob("*.rs")
                    for m in re.findall(r'"tailweight\.([a-z_]+)"', p.read_text())}
    return aggregator | {f"tailweight_{m}" for m in filter_stats}


def test_rules_read_only_exported_metrics():
    exprs = " ".join(r["expr"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"])
    used = set(re.findall(r"\btailweight_[a-z_]+\b", exprs))
    assert used, exprs
    assert used <= exported_metrics(), used - exported_metrics()
