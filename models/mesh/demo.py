"""The demo agents' declarations: their names and what each says when it runs, which the worker
serves (`activities/kinds/demo.py`, `--demo-agents`) and the CLI checks specs against without
loading any agent code (`coord.models.mesh.declared`)."""

from collections.abc import Mapping

FEATURE_DEPLOYMENT_AGENTS: Mapping[str, str] = {
    "BuildArtifact": "artifact built",
    "RunTests": "unit tests passed",
    "DeployToStaging": "deployed to staging",
    "RunE2ETests": "end-to-end tests passed",
    "DeployToProduction": "deployed to production",
    "RemoveFromStaging": "staging deployment removed (or was never there)",
    "RollbackProduction": "production rolled back (or was never changed)",
}

USER_STORY_AGENTS: Mapping[str, str] = {
    "product-strategist": "user story refined",
    "backend-architect": "API designed: 12 endpoints, 5 schemas",
    "ux-designer": "wireframes drawn",
    "test-engineer": "tests planned and run",
    "python-pro": "backend implemented",
    "database-specialist": "schema designed",
    "frontend-specialist": "frontend implemented",
}
CARRIED_FIELDS = ("feature", "story", "inject")

PLAN_WORKERS: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "code-analyzer": ("3 hotspots in models/", ("Reading the sources", "Mapping the call graph")),
    "security-scanner": ("1 advisory: urllib3", ("Scanning dependencies", "Checking for secrets")),
    "developer": ("findings fixed", ("Reading the findings", "Fixing null check", "Running tests")),
    "doc-writer": ("upgrade guide written", ("Outlining the guide", "Writing the examples")),
    "doc-tester": ("12 examples pass", ("Running the examples",)),
    "release-manager": ("1.4 ready to tag", ("Collecting the results", "Writing release notes")),
}
"""The plan's workers: what each reports when done, and the progress it reports on the way."""
PLAN_REVIEWERS: Mapping[str, str] = {
    "reviewer": "the null-check fix has no regression test",
    "verifier-b": "the release notes omit the urllib3 advisory",
    "verifier-c": "the changelog does not link the upgrade guide",
}
"""The plan's reviewer and verifiers: the fault each finds in a first result it is told to
reject (`inject: {reject: [...]}`)."""


DEMO_AGENTS: tuple[str, ...] = (
    *FEATURE_DEPLOYMENT_AGENTS,
    *USER_STORY_AGENTS,
    *PLAN_WORKERS,
    *PLAN_REVIEWERS,
)
"""Every demo agent, in the order the worker registers them."""
