"""Every example config under examples/gateway validates (structure, cross-references and, with its
variables set, live checks), so the examples cannot drift from the models."""

from __future__ import annotations

from pathlib import Path

import pytest

from gatewayproxy.config.loader import load_config_file
from gatewayproxy.pipeline.live import live_problems

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples" / "gateway").glob("*.yaml"))
KINDS = {
    "vendor_a",
    "vendor_b",
    "vendor_a_compatible",
    "cloud_vendor_c",
    "vendor_d",
    "vendor_e",
    "mcp",
    "native_api_key",
}


def test_there_is_an_example_per_destination_kind() -> None:
    assert {path.stem for path in EXAMPLES} >= KINDS


@pytest.mark.parametrize("path", EXAMPLES, ids=[path.stem for path in EXAMPLES])
def test_example_is_valid(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in (
        "VAULT__PROVIDER_KEYS__VENDOR_A",
        "VAULT__PROVIDER_KEYS__VENDOR_B",
        "LOCAL_LLM_KEY",
        "VAULT__AZURE__PROD",
        "VAULT__GCP__VERTEX",
        "VAULT__MCP_TOKENS__DOCS",
        "VAULT__NATIVE__SEARCH",
        "VAULT__KEYS__VENDOR_A",
        "VAULT__KEYS__VENDOR_B",
        "VAULT__DEMO__VENDOR_B",
    ):
        monkeypatch.setenv(variable, "example")
    loaded = load_config_file(str(path))
    assert loaded.config.destinations
    assert live_problems(loaded.config) == []
