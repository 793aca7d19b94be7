"""Why a replica actor did not start, as the pass says it (no Ray needed: the text is Ray's).

The message below is the one Ray 2.60 raised when ``ray job submit`` ran a pass on a head whose
Python had no autotune (bench/results/issue39-close/ray-job-submit.txt): the pass's one line
must name the node and the fix instead of Ray's traceback."""

from __future__ import annotations

from autotune.orchestrate.ray_pool import _start_failure

RAY_SAID = (
    "The actor died because of an error raised in its creation task, "
    "\x1b[36mray::autotune-12a8cd1b-ray-1:ReplicaWorker.__init__()\x1b[39m (pid=19473, "
    "ip=192.0.2.2, actor_id=5003c23309e3dcac71abb5ae02000000, repr=<autotune.orchestrate."
    "ray_pool.FunctionActorManager._create_fake_actor_class.<locals>.TemporaryActor object at "
    "0x7f23dde1ae50>)\n  At least one of the input arguments for this task could not be "
    "computed:\nray.exceptions.RaySystemError: System error: No module named 'autotune'\n"
    "traceback: Traceback (most recent call last):\n  File \"/tmp/i39/rayvenv/lib/python3.11/"
    "site-packages/ray/_private/serialization.py\", line 595, in deserialize_objects\n"
    "ModuleNotFoundError: No module named 'autotune'")


def test_a_node_without_autotune_is_named_with_the_fix() -> None:
    message = _start_failure(RuntimeError(RAY_SAID))
    assert message == (
        "a replica actor failed to start on the node at 192.0.2.2: the Python that runs Ray "
        "there cannot import autotune (ModuleNotFoundError). Fix: install autotune, the "
        "driver's version, on every node of the cluster (pip install 'autotune[vllm]', or the "
        "project's image; docs/ray.md, What each node needs)")


def test_any_other_start_failure_keeps_rays_words_on_one_line() -> None:
    said = RAY_SAID.replace("No module named 'autotune'", "No module named 'vllm'")
    message = _start_failure(RuntimeError(said))
    assert message.startswith("a replica actor failed to start: The actor died because of an "
                              "error raised in its creation task")
    assert "No module named 'vllm'" in message and "\n" not in message
