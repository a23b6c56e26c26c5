"""The answers layer: one module per command, one function per module, named after the command.

``dlsched.answers.simulate.simulate(model, oracle, ...)`` is what ``dlsched
simulate`` computes; the command parses, calls it and renders what it returns.
Each takes small option dataclasses (:mod:`dlsched.answers.options`) rather
than long keyword lists, and settles nothing about the command line: the CLI
resolves defaults before it calls.
"""
