"""The `started ...` links `coord` prints point at the UI beside the server it talks to: a dev
server's, at its port plus 1000 (as `coord server --port 7363` serves it on 8363), unless
$COORD_UI_URL says where."""

import pytest

from coord.infra.temporal import workflow_link


@pytest.mark.parametrize(
    ("environment", "link"),
    [
        ({}, "http://localhost:8233/namespaces/default/workflows/saga-x"),
        (
            {"TEMPORAL_ADDRESS": "localhost:7363"},
            "http://localhost:8363/namespaces/default/workflows/saga-x",
        ),
        (
            {"TEMPORAL_ADDRESS": "127.0.0.1:7300"},
            "http://127.0.0.1:8300/namespaces/default/workflows/saga-x",
        ),
        (
            {"TEMPORAL_ADDRESS": "temporal.internal:7233"},
            "http://localhost:8233/namespaces/default/workflows/saga-x",
        ),
        (
            {"TEMPORAL_ADDRESS": "localhost:7363", "COORD_UI_URL": "https://ui.example.com/"},
            "https://ui.example.com/namespaces/default/workflows/saga-x",
        ),
    ],
)
def test_links_point_at_the_ui_beside_the_server(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], link: str
) -> None:
    for name in ("COORD_UI_URL", "TEMPORAL_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert workflow_link("saga-x") == link
