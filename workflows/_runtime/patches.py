"""Patches asked at once: a workflow whose run takes a bundle (one patch id standing for a set
of earlier ones, `adopt`) answers each of those as in force without asking Temporal, so its
history carries one marker and one `TemporalChangeVersion` upsert for the set instead of two
events per patch. Runs recorded before the bundle ask each patch as they did (`patched` falls
back to `workflow.patched`), so they replay unchanged.

The set in force is kept on the workflow instance (`IN_FORCE`), not in this module: the
module is shared by every run of the worker."""

from collections.abc import Sequence, Set

from temporalio import workflow

IN_FORCE = "patches_in_force"
"""The workflow instance's attribute holding the patch ids its run takes without asking."""


def adopt(bundle: str, covered: Set[str], on: object | None = None) -> bool:
    """Asks `bundle` (first thing in the run, before any patch it covers is asked); when the
    run takes it, every patch of `covered` is in force from now on. Returns whether it does.
    `on`: the workflow instance, for a workflow's `__init__` (the SDK knows it only after)."""
    taken = workflow.patched(bundle)
    setattr(on or workflow.instance(), IN_FORCE, frozenset(covered) if taken else frozenset())
    return taken


def adopt_newest(bundles: Sequence[tuple[str, Set[str]]], on: object | None = None) -> bool:
    """Asks `bundles` (each a bundle and the patches it covers), newest first, until the run
    takes one (`adopt`): a new run takes the newest; a run recorded before, the one it took
    then, or none (it asked each patch). Returns whether it took one."""
    return any(adopt(bundle, covered, on) for bundle, covered in bundles)


def take(covered: Set[str], on: object | None = None) -> None:
    """Every patch of `covered` in force without asking anything: for a run whose start event
    says which set it takes (a version its starter wrote), so its history carries neither a
    marker nor a `TemporalChangeVersion` upsert for them."""
    setattr(on or workflow.instance(), IN_FORCE, frozenset(covered))


def patched(patch_id: str, on: object | None = None) -> bool:
    """`workflow.patched(patch_id)`, answered True without a marker when the run's bundle
    covers it (`on`: as for `adopt`)."""
    if patch_id in getattr(on or workflow.instance(), IN_FORCE, ()):
        return True
    return workflow.patched(patch_id)


def in_force(patch_id: str, on: object | None = None) -> bool:
    """Whether the run's bundle covers `patch_id`, never asking Temporal: for a change a run
    taking an older bundle (or none) goes without, wherever in the run it is met, since a marker
    asked mid-run could land after a local run's (`adopt`)."""
    return patch_id in getattr(on or workflow.instance(), IN_FORCE, ())


def adopted(on: object | None = None) -> bool:
    """Whether the run has settled which patches it takes without asking (`adopt`, `take`): a
    signal handled in the run's first workflow task runs before a run that settles them as it
    begins has done so."""
    return hasattr(on or workflow.instance(), IN_FORCE)
