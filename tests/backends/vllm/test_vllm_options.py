"""Options of the vllm backend: defaults, validation, attach-mode URLs."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.backends import create_backend
from autotune.backends.vllm import VllmBackend, VllmOptions, create_vllm_backend
from autotune.backends.vllm._options import parse_options
from autotune.errors import ConfigError
from autotune.types import ServeSpec

SERVE = ServeSpec(model="m", draft_model="d", method="draft_model", draft_block_size=4)


def test_defaults_launch_on_loopback() -> None:
    opts = parse_options({})
    assert opts == VllmOptions()
    assert opts.host == "127.0.0.1"
    assert not opts.attach


def test_registry_builds_vllm_backend_without_side_effects(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    backend = create_backend("vllm", SERVE, {"log_dir": str(log_dir)}, seed=3)
    assert isinstance(backend, VllmBackend)
    assert backend.kind == "vllm" and backend.seed == 3
    assert not log_dir.exists()  # nothing is created before a start
    desc = backend.describe()
    assert desc["mode"] == "launch" and desc["model"] == "m"
    assert desc["command"][1:] == ["-m", "vllm.entrypoints.openai.api_server"]


@pytest.mark.parametrize("url, expected", [
    ("http://10.1.2.3:8000", "http://10.1.2.3:8000"),
    ("http://127.0.0.1:8000/", "http://127.0.0.1:8000"),
    ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000"),
    ("https://vllm.example/v1/", "https://vllm.example"),
])
def test_endpoint_is_normalised(url: str, expected: str) -> None:
    opts = parse_options({"endpoint": url})
    assert opts.endpoint == expected and opts.attach


def test_attach_mode_says_what_it_covers() -> None:
    desc = create_vllm_backend(SERVE, {"endpoint": "http://127.0.0.1:9"}).describe()
    assert desc["mode"] == "attach"
    assert desc["endpoint"] == "http://127.0.0.1:9"
    assert "only what that server was started with" in desc["note"]


@pytest.mark.parametrize("options, needle", [
    ({"endpoint": "localhost:8000"}, "endpoint='localhost:8000'"),
    ({"startup_timeout_s": 0}, "startup_timeout_s=0"),
    ({"request_timeout_s": "soon"}, "request_timeout_s='soon'"),
    ({"stop_grace_s": -1}, "stop_grace_s=-1"),
    ({"stop_grace_s": float("nan")}, "stop_grace_s=nan"),
    ({"metrics": "maybe"}, "metrics='maybe'"),
    ({"port_retries": -1}, "port_retries=-1"),
    ({"host": " "}, "host="),
])
def test_invalid_values_name_the_option(options: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_options(options)
    assert needle in str(err.value)


def test_unknown_option_lists_known_ones() -> None:
    with pytest.raises(ConfigError) as err:
        parse_options({"endpoints": "http://x:1"})
    text = str(err.value)
    assert "endpoints" in text
    for known in ("endpoint", "startup_timeout_s", "request_timeout_s", "log_dir", "host",
                  "stop_grace_s"):
        assert known in text


def test_values_are_converted() -> None:
    opts = parse_options({"startup_timeout_s": "90", "metrics": "false", "log_dir": "~/x",
                          "port_retries": 0, "host": "::1"})
    assert opts.startup_timeout_s == 90.0
    assert opts.metrics is False
    assert opts.log_dir == Path("~/x").expanduser()
    assert opts.port_retries == 0 and opts.host == "::1"
