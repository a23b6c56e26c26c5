"""The ``dlsched`` command group.

Commands live one per module and are imported only when invoked, so
``dlsched --help`` starts fast and never loads a framework.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import signal
import sys

# Silence framework log spam before anything can import them.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KMP_WARNINGS", "0")
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

import click

from dlsched import __version__

# command name -> (module, attribute, one-line help)
COMMANDS = {
    "inspect": ("dlsched.cli.inspect_cmd", "inspect", "Summarise a model's DAG: ops, parameters, transfers."),
    "profile": ("dlsched.cli.profile_cmd", "profile", "Build a per-op time oracle by running the model."),
    "bounds": ("dlsched.cli.bounds_cmd", "bounds", "Makespan bounds U, L, speedup S and efficiency E."),
    "order": ("dlsched.cli.order_cmd", "order", "Write a parameter-transfer priority file (TIC, TAC, …)."),
    "simulate": ("dlsched.cli.simulate_cmd", "simulate", "Simulate iterations under a transfer order."),
    "plan-batch": ("dlsched.cli.plan_batch_cmd", "plan_batch", "Memory-bounded batch plans, per worker."),
    "replay-batch": ("dlsched.cli.batch_policy_cmd", "replay_batch", "Replay a speed trace against batch policies."),
    "plan-ddp": ("dlsched.cli.plan_ddp_cmd", "plan_ddp", "DDP's bucket_cap_mb for a model; does ordering pay."),
    "plan-fsdp": ("dlsched.cli.plan_fsdp_cmd", "plan_fsdp", "FSDP2 units, reshards and prefetch under a memory budget."),
    "plan-cluster": ("dlsched.cli.plan_cluster_cmd", "plan_cluster", "Devices and parameter servers for a target."),
    "snapshot": ("dlsched.cli.check_cmd", "snapshot", "Record a CI baseline of a model's figures."),
    "check": ("dlsched.cli.check_cmd", "check", "Compare a model against a CI baseline."),
    "net-peer": ("dlsched.cli.net_peer_cmd", "net_peer", "Serve network measurements for --measure-network."),
    "train-ps": ("dlsched.cli.train_ps_cmd", "train_ps", "Real parameter-server run with per-worker batch policies."),
    "train-allreduce": ("dlsched.cli.train_allreduce_cmd", "train_allreduce",
                        "Train for real with DDP or eager-SGD's solo/majority all-reduce."),
    "validate": ("dlsched.cli.validate_cmd", "validate", "A real PS, DDP or FSDP2 cluster; predicted vs measured."),
    "trace": ("dlsched.cli.trace_cmd", "trace", "Rate a job's torch.profiler traces, one per rank."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return [name for name, (mod, _, _) in COMMANDS.items() if importlib.util.find_spec(mod)]

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        mod, attr, _ = COMMANDS[name]
        try:
            module = importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name == mod:
                return None
            raise
        return getattr(module, attr)

    def format_commands(self, ctx, formatter):
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="dlsched")
def cli():
    """dlsched: why is my distributed iteration slower than it should be?

    Rate a job's torch.profiler traces; profile a model, bound its iteration
    time, order its parameter transfers (TIC/TAC) and simulate iterations;
    plan DDP buckets, FSDP2 units and batch sizes; check the predictions on a
    real cluster.
    """


def _exit_on_sigterm(signum, frame):
    # An exception, unlike the default action, runs the cleanup that removes temporary files.
    raise SystemExit(128 + signum)


def _print_dlsched_warnings() -> None:
    """dlsched's own warnings become one ``warning:`` line on stderr; others keep Python's format."""
    import warnings

    from dlsched.errors import DlschedWarning
    warnings.filterwarnings("default", category=DlschedWarning)  # even under PYTHONWARNINGS=ignore: they are output
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, DlschedWarning):
            click.echo(f"warning: {message}", err=True)
        else:
            shown(message, category, filename, lineno, file, line)
    warnings.showwarning = show


def main(argv=None):
    """Console entry point: user errors exit 2 with one paragraph, no traceback."""
    from dlsched.errors import DlschedError

    _print_dlsched_warnings()
    try:
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    except ValueError:  # not the main thread (an embedding program owns signals)
        pass
    try:
        cli.main(args=argv, prog_name="dlsched", standalone_mode=False)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(2 if e.exit_code not in (0, 1) else e.exit_code)
    except click.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except DlschedError as e:
        click.echo(f"Error: {e}", err=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        click.echo("Interrupted.", err=True)
        sys.exit(130)
    except MemoryError:
        click.echo("Error: out of memory while processing the model.", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
