"""Scrape Weir's /metrics and parse it with Prometheus' own OpenMetrics parser.

Usage: scrape.py URL. Prints one JSON object: {family: {"type": t, "samples": [[name,
labels, value], ...]}}. The parser raises on anything that is not valid OpenMetrics.
"""

import json
import sys
import urllib.request

from prometheus_client.openmetrics.parser import text_string_to_metric_families

with urllib.request.urlopen(sys.argv[1], timeout=10) as r:
    content_type = r.headers.get("Content-Type", "")
    text = r.read().decode()
assert content_type.startswith("application/openmetrics-text"), content_type
out = {}
for fam in text_string_to_metric_families(text):
    out[fam.name] = {
        "type": fam.type,
        "unit": fam.unit,
        "samples": [[s.name, s.labels, s.value] for s in fam.samples],
    }
print(json.dumps(out))
