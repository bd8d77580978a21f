"""bermd's /metrics read as Prometheus reads it: parsed with the Python prometheus_client
parser, on the token-less --metrics listener and behind the token on the MCP listener."""

import json
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def scrape(url: str, headers: dict | None = None) -> dict:
    """Every sample, by (name, sorted labels)."""
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain"), response.headers
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def calls(samples: dict, outcome: str) -> float:
    return samples.get(("berm_calls_total", (("outcome", outcome), ("program", "echo"), ("tool", "echo"))), 0)


def test_calls_are_counted_by_outcome_and_timed(bermd):
    local = f"http://127.0.0.1:{bermd.metrics_port}/metrics"
    before = scrape(local)
    for i in range(5):
        out = bermd.berm("call", "echo_echo", json.dumps({"message": f"m{i}"}))
        assert out.returncode == 0, out.stderr
    bad = bermd.berm("call", "echo_echo", json.dumps({"nope": 1}), check=False)
    assert bad.returncode != 0
    missing = bermd.berm("call", "nothere_tool", "{}", check=False)
    assert missing.returncode != 0
    after = scrape(local)
    assert calls(after, "ok") - calls(before, "ok") == 5, after
    assert calls(after, "error") - calls(before, "error") == 1, after
    key = ("berm_calls_unknown_tool_total", ())
    assert after[key] - before.get(key, 0) == 1, after
    assert after[("berm_calls_in_flight", ())] == 0
    count = ("berm_call_duration_seconds_count", (("program", "echo"), ("tool", "echo")))
    assert after[count] - before.get(count, 0) == 6, after
    assert after[("berm_resident_memory_bytes", ())] > 1 << 20
    # No client-sent name became a label.
    assert not any("nothere" in str(labels) for _, labels in after), after


def test_metrics_on_the_mcp_listener_need_its_token(bermd):
    url = f"http://127.0.0.1:{bermd.port}/metrics"
    try:
        urllib.request.urlopen(url, timeout=10)
        raise AssertionError("/metrics answered without the token")
    except urllib.error.HTTPError as e:
        assert e.code == 401, e
    samples = scrape(url, bermd.headers)
    assert ("berm_calls_in_flight", ()) in samples, samples
