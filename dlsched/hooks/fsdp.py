"""An FSDP plan in a user's own script: ``fully_shard`` and the prefetch setters as ``plan-fsdp`` says (issue 30).

In a script launched by ``torchrun``, after the process group is up::

    model = apply_plan(model, "plan.json")   # instead of the fully_shard calls

For each unit of the plan (:mod:`dlsched.formats.fsdp_plan_file`), deepest
first as FSDP2 requires, ``fully_shard(module, reshard_after_forward=...)``;
then ``fully_shard(model)`` (the root); then
``set_modules_to_forward_prefetch`` and ``set_modules_to_backward_prefetch``
with the plan's lists; and, if the plan says ``unshard_async``,
``model._set_unshard_async_op(True)``, without which an all-gather on CPU
blocks the training thread and a prefetch hides nothing
(:mod:`dlsched.analyses.fsdp_step`). That setter is private in torch 2.13:
a torch without it is refused with a message rather than silently run
without overlap.

Before anything is sharded the plan is checked against the model: the
fingerprint of its trained parameters' names and shapes (a plan for another
model is refused), and every module path it names (a typo is refused, with
the nearest names). Training is unchanged: the same gradients are averaged
over the same shards, so the parameters equal those of the same job without
a plan.

Public API: :func:`apply_plan`, :func:`module_fingerprint`, :class:`FsdpPlanError`.
"""
from __future__ import annotations

import difflib
import warnings
from pathlib import Path

from dlsched.errors import DlschedWarning
from dlsched.formats.fsdp_plan_file import FsdpPlan, FsdpPlanError, parameter_fingerprint, read_fsdp_plan

__all__ = ["FsdpPlanError", "apply_plan", "module_fingerprint"]


def module_fingerprint(model) -> str:
    """:func:`~dlsched.formats.fsdp_plan_file.parameter_fingerprint` of ``model``'s trained parameters."""
    return parameter_fingerprint((n, tuple(p.shape)) for n, p in model.named_parameters() if p.requires_grad)


def check_plan(model, plan: FsdpPlan, where: str = "the FSDP plan") -> dict:
    """The plan's modules by path, after checking that the plan was made for ``model``.

    Raises
    ------
    FsdpPlanError
        Another model's plan, or a module path the model does not have.
    """
    mine = module_fingerprint(model)
    if plan.fingerprint != mine:
        raise FsdpPlanError(f"{where} was made for model {plan.model_name!r} (parameters {plan.fingerprint}), but "
                            f"this model's parameters are {mine}: another model, or the same one changed; make a "
                            "new plan with `dlsched plan-fsdp MODEL ... --write-plan FILE`")
    modules = dict(model.named_modules())
    named = [m for m, _ in plan.units]
    for lists in (plan.forward_prefetch, plan.backward_prefetch):
        for src, targets in lists.items():
            named += [src, *targets]
    missing = sorted({m for m in named if m not in modules})
    if missing:
        hints = []
        for m in missing[:4]:
            near = difflib.get_close_matches(m, [k for k in modules if k], n=2)
            hints.append(f"{m!r}" + (f" (did you mean {' or '.join(repr(n) for n in near)}?)" if near else ""))
        raise FsdpPlanError(f"{where} names module{'s' if len(missing) > 1 else ''} the model does not have: "
                            f"{', '.join(hints)}{' …' if len(missing) > 4 else ''}")
    units = {m for m, _ in plan.units} | {""}
    strays = sorted({m for lists in (plan.forward_prefetch, plan.backward_prefetch)
                     for src, targets in lists.items() for m in [src, *targets] if m not in units})
    if strays:
        raise FsdpPlanError(f"{where}: the prefetch lists name {', '.join(repr(m) for m in strays[:4])}, which "
                            "the plan does not make units; only units can prefetch or be prefetched")
    return modules


def apply_plan(model, plan, *, mesh=None):
    """Shard ``model`` with FSDP2 as ``plan`` (a path, or a :class:`FsdpPlan`) says; returns ``model``.

    Raises
    ------
    FsdpPlanError
        An unreadable plan, a plan for another model, a module path the model lacks, no process group, or
        a torch without the async all-gather setter the plan needs.
    """
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    where = str(plan) if isinstance(plan, (str, Path)) else "the FSDP plan"
    if isinstance(plan, (str, Path)):
        plan = read_fsdp_plan(plan)
    modules = check_plan(model, plan, where)
    if not dist.is_available() or not dist.is_initialized():
        raise FsdpPlanError("apply_plan needs the process group: call it after torchrun's rendezvous "
                            "(dlsched.runtime.torchrun.join(), or dist.init_process_group())")
    if dist.get_world_size() != plan.workers:
        warnings.warn(f"{where} was planned for {plan.workers} processes; this job has {dist.get_world_size()}: "
                      "its predicted figures do not apply", DlschedWarning, stacklevel=2)
    if plan.unshard_async and not _has_async_setter():
        raise FsdpPlanError(f"{where} issues all-gathers async, and this torch's fully_shard has no "
                            "_set_unshard_async_op (torch 2.13 has); without it a prefetch on CPU hides nothing")
    kw = {"mesh": mesh} if mesh is not None else {}
    for m, reshard in sorted(plan.units, key=lambda u: -u[0].count(".")):  # nested units first
        fully_shard(modules[m], reshard_after_forward=reshard, **kw)
    fully_shard(model, **kw)
    for setter, lists in (("set_modules_to_forward_prefetch", plan.forward_prefetch),
                          ("set_modules_to_backward_prefetch", plan.backward_prefetch)):
        for src, targets in lists.items():
            if targets:
                getattr(modules[src], setter)([modules[t] for t in targets])
    if plan.unshard_async:
        model._set_unshard_async_op(True)
    return model


def _has_async_setter() -> bool:
    from torch.distributed.fsdp import FSDPModule
    return hasattr(FSDPModule, "_set_unshard_async_op")
