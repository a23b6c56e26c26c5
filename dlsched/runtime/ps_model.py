"""The model a parameter-server job trains, built through :mod:`dlsched.factory`.

Every rank, the priority-file check and :func:`~dlsched.runtime.ps_data.reference_train`
build it the same way: ``call_factory(cfg.model, **cfg.model_kwargs)``, so the
factory runs guarded (:func:`dlsched.factory.user_code`) and a broken one is an
:class:`~dlsched.errors.ImportFailure` with one message.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from dlsched.errors import PriorityFileError
from dlsched.factory import call_factory

if TYPE_CHECKING:
    from .ps_config import PSConfig


def build_model(cfg: PSConfig):
    """``(module, example_inputs)`` from the factory, whose parameters must be those of ``cfg.order``.

    Raises
    ------
    ImportFailure
        The factory cannot be loaded, raises, or returns something else.
    PriorityFileError
        The order misses some of the module's parameters or names unknown ones.
    """
    module, inputs, _ = call_factory(cfg.model, **cfg.model_kwargs)
    check_names(cfg.order, [n for n, _ in module.named_parameters()], "the transfer order", cfg.model)
    return module, inputs


def parameter_names(cfg: PSConfig) -> list[str]:
    """The names of the parameters of ``cfg.model``, in declaration order."""
    return order_from_module(cfg.model, **cfg.model_kwargs)


def order_from_module(model: str, **model_kwargs) -> list[str]:
    """Parameter names in declaration order (the topological order of a plain CNN)."""
    module, _, _ = call_factory(model, **model_kwargs)
    return [n for n, _ in module.named_parameters()]


def check_names(order: list[str], names: list[str], where: str, model: str) -> None:
    """Refuse an ``order`` that is not a permutation of the parameter ``names``.

    Raises
    ------
    PriorityFileError
        Missing or unknown names, the first five of each quoted.
    """
    missing = sorted(set(names) - set(order))
    unknown = sorted(set(order) - set(names))
    if missing or unknown:
        raise PriorityFileError(
            f"{where} does not match model {model!r}: "
            + (f"missing parameters {missing[:5]}" if missing else "")
            + ("; " if missing and unknown else "") + (f"unknown names {unknown[:5]}" if unknown else ""))
