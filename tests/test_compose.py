"""docker-compose.yml, the self-hosted path: valid Compose, scalable workers, the project's search
attributes registered, no deprecated auto-setup image. Static checks only; no Docker needed."""

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from coord.infra.devserver import FLOOD_CONFIG, TASK_DISPATCH_CONFIG
from coord.models.wire import contract

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILE = ROOT / "docker-compose.yml"
SEARCH_ATTRIBUTES = (
    "CorrelationId",
    "CoordPattern",
    "CoordStatus",
    "CoordFailureType",
    "CoordEventType",
    "CoordTopic",
    "CoordAgents",
)


def services() -> dict[str, dict[str, Any]]:
    compose: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text())
    result: dict[str, dict[str, Any]] = compose["services"]
    return result


def test_valid_against_compose_spec() -> None:
    check_jsonschema = Path(sys.executable).parent / "check-jsonschema"
    result = subprocess.run(
        [str(check_jsonschema), "--builtin-schema", "vendor.compose-spec", str(COMPOSE_FILE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_worker_scales_and_takes_its_server_from_the_environment() -> None:
    worker = services()["worker"]
    assert "build" in worker
    assert "container_name" not in worker, "a fixed name breaks `--scale worker=N`"
    assert "ports" not in worker, "host ports break `--scale worker=N`"
    assert str(worker["environment"]["TEMPORAL_ADDRESS"]).startswith("${TEMPORAL_ADDRESS")


@pytest.mark.parametrize("name", SEARCH_ATTRIBUTES)
def test_namespace_job_registers_search_attribute(name: str) -> None:
    assert name in yaml.safe_dump(services()["temporal-create-namespace"])


def test_search_attributes_match_the_workflows() -> None:
    assert {key.name for key in contract.SEARCH_ATTRIBUTES} == set(SEARCH_ATTRIBUTES)


def test_no_deprecated_auto_setup_image() -> None:
    images = {name: str(service.get("image", "")) for name, service in services().items()}
    assert not {name: image for name, image in images.items() if "auto-setup" in image}


def test_server_dispatches_tasks_as_the_embedded_one() -> None:
    """Fairness, priority and task loading are the server's: the compose server is configured
    as every dev server the project starts."""
    server = services()["temporal"]
    path = Path(server["environment"]["DYNAMIC_CONFIG_FILE_PATH"])
    host_dir, mounted, _ = server["volumes"][0].split(":")
    config = yaml.safe_load((ROOT / host_dir / path.relative_to(mounted)).read_text())
    embedded = dict(value.split("=") for value in (*TASK_DISPATCH_CONFIG, *FLOOD_CONFIG)[1::2])
    assert {key: str(config[key][0]["value"]).lower() for key in embedded} == embedded
