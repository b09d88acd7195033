"""A warm build sandbox goes to one build only, and fits only a build of its kind (25)."""

from __future__ import annotations

from unittest import mock

from worker.templates.warm import WARM, BuildSandboxes, WarmKey

KEY = WarmKey("sha256:" + "a" * 64, 1.0, 1024, network=False)


def _sandboxes(keep: int = 2) -> BuildSandboxes:
    client = mock.Mock()
    client.containers.create.return_value.attrs = {"State": {"Running": True}}
    with mock.patch("worker.templates.sandbox.agent_path", return_value="/agent.pyz"):
        return BuildSandboxes(client, "n1", egress=None, egress_port=3128, keep=keep)


def _warm(boxes: BuildSandboxes, key: WarmKey) -> None:
    with mock.patch("worker.templates.sandbox.agent_path", return_value="/agent.pyz"):
        boxes.warm(key, "img")


def test_a_warm_sandbox_is_taken_once_and_renamed_after_its_build() -> None:
    boxes = _sandboxes()
    _warm(boxes, KEY)
    labels = boxes.client.containers.create.call_args.kwargs["labels"]
    assert labels == {"sandgrid.build": WARM, "sandgrid.build-node": "n1"}
    taken = boxes.take(KEY, "b1")
    assert taken is not None
    taken.container.rename.assert_called_once_with("sandgrid-build-b1")
    assert boxes.take(KEY, "b2") is None  # never handed to a second build


def test_only_a_build_of_its_kind_takes_it() -> None:
    boxes = _sandboxes()
    _warm(boxes, KEY)
    for other in (
        WarmKey("sha256:" + "b" * 64, 1.0, 1024, network=False),  # another base image
        WarmKey(KEY.image_id, 2.0, 1024, network=False),
        WarmKey(KEY.image_id, 1.0, 2048, network=False),
        WarmKey(KEY.image_id, 1.0, 1024, network=True),
    ):
        assert boxes.take(other, "b1") is None
    assert boxes.take(KEY, "b1") is not None


def test_over_keep_kinds_the_oldest_is_removed_and_close_removes_the_rest() -> None:
    boxes = _sandboxes(keep=1)
    _warm(boxes, KEY)
    first = boxes._warm[KEY]
    other = WarmKey(KEY.image_id, 2.0, 1024, network=False)
    _warm(boxes, other)
    first.container.remove.assert_called_with(force=True)
    assert boxes.take(KEY, "b1") is None
    second = boxes._warm[other]
    boxes.close()
    second.container.remove.assert_called_with(force=True)
    _warm(boxes, KEY)  # none is made once closed
    assert boxes.take(KEY, "b1") is None


def test_a_base_that_cannot_start_keeps_no_warm_sandbox() -> None:
    import docker.errors

    boxes = _sandboxes()
    boxes.client.containers.create.return_value.start.side_effect = docker.errors.APIError(
        'error finding executable "python3" in PATH'
    )
    _warm(boxes, KEY)
    assert boxes.take(KEY, "b1") is None
    boxes.client.containers.create.return_value.remove.assert_called_with(force=True)


def test_no_warm_sandbox_when_keep_is_zero() -> None:
    boxes = _sandboxes(keep=0)
    _warm(boxes, KEY)
    boxes.client.containers.create.assert_not_called()
