"""let_go: a hook waits until gloo's worker threads hold none of its tensors (runtime/gloo_release.py)."""
import pytest

from dlsched.runtime.gloo_release import let_go


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{tmp_path_factory.mktemp('pg') / 'store'}", rank=0,
                            world_size=1)
    yield dist.new_group(backend="gloo")
    dist.destroy_process_group()


def test_tensors_of_finished_collectives_are_let_go(group):
    import torch
    import torch.distributed as dist
    bufs = [torch.ones(1000) for _ in range(8)]
    for b in bufs:
        dist.all_reduce(b, group=group, async_op=True).wait()
    assert let_go(bufs, timeout=10.0)
    assert all(b._use_count() == 1 for b in bufs)


def test_a_tensor_still_held_is_reported_after_the_timeout(group):
    import torch
    import torch.distributed as dist
    b = torch.ones(10)
    work = dist.all_reduce(b, group=group, async_op=True)
    work.wait()
    assert not let_go([b], timeout=0.05)  # the work object still holds it
    del work
    assert let_go([b], timeout=10.0)
