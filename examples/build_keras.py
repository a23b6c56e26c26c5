"""Build TensorFlow example models for dlsched: Keras ResNet50/VGG16, a Keras corpus, a TF1 graph.

Usage::

    python examples/build_keras.py [OUT_DIR] [--models resnet50,vgg16,efficientnetb0] [--batch N]
    python examples/build_keras.py OUT_DIR --tf1      # the small TF1-style graph
    python examples/build_keras.py OUT_DIR --corpus mobilenetv2,inceptionv3

``OUT_DIR`` defaults to ``$DLSCHED_CACHE`` or ``.cache/models``. Weights are
random (``weights=None``); nothing is downloaded.

For each Keras model NAME (ResNet50 and VGG16 at 224×224; EfficientNetB0, whose swish is a
``tf.custom_gradient``, at 64×64 to stay fast) it writes

- ``NAME.pb``: the forward GraphDef of a ``tf.function`` (inference mode) with a
  symbolic batch (``batch=None``) or a fixed one. A traced function reaches its
  variables through captured resource ``Placeholder``s with anonymous names
  (``…/ReadVariableOp/resource``). This script rewrites each of them into a
  ``VarHandleOp`` node named after the variable's path (``conv1_conv/kernel``),
  with its ``shape``, ``dtype``, ``shared_name`` and a ``_trainable`` bool
  attribute, and puts them first, in the model's declaration order. The graph
  therefore names its own parameters (no sidecar file) and can be run by
  ``tf.compat.v1.Session`` once its variables are initialised.
- ``NAME_savedmodel/``: ``tf.saved_model.save`` of a module holding the model,
  with a ``serving_default`` signature (input ``x``, batch ``None``).
- ``NAME_keras.json``: Keras's own figures (``count_params()``, trainable
  parameters, variable names) that tests check the importers against; dlsched
  itself never reads it.

``--corpus NAME`` (``mobilenetv2``, ``inceptionv3``) saves a Keras model the two
ways users save one, at a small input (MobileNetV2 96×96, InceptionV3 75×75,
its minimum; batch ``None``): ``NAME_tf_saved_model/`` by
``tf.saved_model.save(model, d)`` and ``NAME_export/`` by ``model.export(d)``,
plus ``NAME_corpus.json`` with ``count_params()``. Nothing is wrapped or
renamed: these are the files a user would hand to dlsched.

``--tf1`` writes ``tf1_mlp.pb``, ``tf1_mlp.pbtxt`` (``VariableV2`` + ``…/read``,
initialisers and a ``Saver``) and ``tf1_mlp_frozen.pb`` (variables folded into
``Const``). It runs in its own process because it switches TF into graph mode
with reference variables, which must not leak into other code.

Example
-------
>>> paths = build("resnet50", ".cache/models")      # doctest: +SKIP
>>> sorted(paths)                                   # doctest: +SKIP
['counts', 'graphdef', 'savedmodel']
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

MODELS = ("resnet50", "vgg16", "efficientnetb0")
INPUT_SHAPES = {"resnet50": (224, 224, 3), "vgg16": (224, 224, 3), "efficientnetb0": (64, 64, 3)}


def default_out_dir() -> Path:
    return Path(os.environ.get("DLSCHED_CACHE", Path(__file__).resolve().parent.parent / ".cache" / "models"))


def _keras_model(name: str):
    import keras

    if name == "resnet50":
        return keras.applications.ResNet50(weights=None)
    if name == "vgg16":
        return keras.applications.VGG16(weights=None)
    if name == "efficientnetb0":
        return keras.applications.EfficientNetB0(weights=None, input_shape=INPUT_SHAPES[name])
    raise ValueError(f"unknown model {name!r}; expected one of {', '.join(MODELS)}")


def _captured_variables(concrete, variables) -> dict[str, object]:
    by_handle = {id(v.handle): v for v in variables}
    found = {}
    for external, internal in concrete.graph.captures:
        var = by_handle.get(id(external))
        if var is not None:
            found[internal.op.name] = var
    return found


def build(name: str, out_dir: str | os.PathLike | None = None, batch: int | None = None,
          force: bool = False) -> dict[str, Path]:
    """Write ``NAME.pb`` and ``NAME_savedmodel/`` into ``out_dir`` (skipped if present).

    Parameters
    ----------
    name : {"resnet50", "vgg16", "efficientnetb0"}
    out_dir : path, optional
        Defaults to ``$DLSCHED_CACHE`` or ``.cache/models``.
    batch : int, optional
        Fix the batch dimension of the traced input; ``None`` (default) keeps it
        symbolic so importers can choose it with ``--batch``.
    force : bool
        Rebuild even when the files exist.

    Returns
    -------
    dict
        ``graphdef`` → the ``.pb`` path, ``savedmodel`` → the folder, ``counts`` →
        ``NAME_keras.json`` with Keras's own ``count_params()``, trainable
        parameter count and variable names (for tests; dlsched never reads it).
    """
    out_dir = Path(out_dir or default_out_dir())
    out_dir.mkdir(parents=True, exist_ok=True)
    suffix = "" if batch is None else f"_b{batch}"
    pb = out_dir / f"{name}{suffix}.pb"
    sm = out_dir / f"{name}{suffix}_savedmodel"
    counts = out_dir / f"{name}{suffix}_keras.json"
    paths = {"graphdef": pb, "savedmodel": sm, "counts": counts}
    if not force and pb.exists() and (sm / "saved_model.pb").exists() and counts.exists():
        return paths

    import tensorflow as tf

    model = _keras_model(name)
    spec = tf.TensorSpec([batch, *INPUT_SHAPES[name]], tf.float32, name="x")

    @tf.function(input_signature=[spec])
    def serve(x):
        return model(x, training=False)

    concrete = serve.get_concrete_function()
    tf_vars = [w.value for w in model.weights]  # keras 3 Variable → tf.Variable
    captures = _captured_variables(concrete, tf_vars)
    order = {id(v): i for i, v in enumerate(tf_vars)}
    captures = dict(sorted(captures.items(), key=lambda kv: order[id(kv[1])]))
    from dlsched.importers.tf_importer import resource_placeholders_to_variables

    specs = {ph: (v.name.split(":")[0], v.shape.as_list(), v.dtype.as_datatype_enum, bool(v.trainable))
             for ph, v in captures.items()}
    graph_def = resource_placeholders_to_variables(concrete.graph.as_graph_def(), specs)

    fd, tmp = tempfile.mkstemp(prefix=f".{pb.name}.", dir=out_dir)
    with os.fdopen(fd, "wb") as f:
        f.write(graph_def.SerializeToString())
    os.replace(tmp, pb)

    # Keras's own figures, for checking importers against (not read by dlsched).
    info = {"count_params": int(model.count_params()),
            "trainable_params": int(sum(int(w.numpy().size) for w in model.trainable_weights)),
            "variables": len(model.weights), "trainable_variables": len(model.trainable_weights),
            "variable_names": [w.path for w in model.weights]}
    fd, tmp = tempfile.mkstemp(prefix=f".{counts.name}.", dir=out_dir)
    with os.fdopen(fd, "w") as f:
        json.dump(info, f, indent=1)
    os.replace(tmp, counts)

    module = tf.Module()
    module.model = model
    module.serve = serve
    tmp_dir = Path(tempfile.mkdtemp(prefix=f".{sm.name}.", dir=out_dir))
    tf.saved_model.save(module, str(tmp_dir), signatures={"serving_default": concrete})
    if sm.exists():
        shutil.rmtree(sm, ignore_errors=True)
    try:
        os.replace(tmp_dir, sm)
    except OSError:  # another process won the race; its copy is as good as ours
        shutil.rmtree(tmp_dir, ignore_errors=True)
    return paths


# -- the Keras corpus: models saved as users save them --------------------------

CORPUS = {"mobilenetv2": (96, 96, 3), "inceptionv3": (75, 75, 3)}  # InceptionV3 accepts nothing smaller
SAVE_STYLES = ("tf_saved_model", "export")


def corpus_paths(name: str, out_dir: str | os.PathLike | None = None) -> dict[str, Path]:
    """Where :func:`build_corpus` writes ``name``: one folder per save style, and ``counts``."""
    out_dir = Path(out_dir or default_out_dir())
    paths = {style: out_dir / f"{name}_{style}" for style in SAVE_STYLES}
    paths["counts"] = out_dir / f"{name}_corpus.json"
    return paths


def build_corpus(name: str, out_dir: str | os.PathLike | None = None, force: bool = False) -> dict[str, Path]:
    """Save Keras ``name`` with ``tf.saved_model.save`` and with ``model.export`` (skipped if present).

    Parameters
    ----------
    name : {"mobilenetv2", "inceptionv3"}
    out_dir : path, optional
        Defaults to ``$DLSCHED_CACHE`` or ``.cache/models``.
    force : bool
        Rebuild even when the files exist.

    Returns
    -------
    dict
        ``tf_saved_model`` and ``export`` → the SavedModel folders, ``counts`` →
        ``NAME_corpus.json`` with Keras's ``count_params()`` and input shape.
    """
    if name not in CORPUS:
        raise ValueError(f"unknown corpus model {name!r}; expected one of {', '.join(CORPUS)}")
    out_dir = Path(out_dir or default_out_dir())
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = corpus_paths(name, out_dir)
    if not force and paths["counts"].exists() and all((paths[s] / "saved_model.pb").exists() for s in SAVE_STYLES):
        return paths

    import keras
    import tensorflow as tf

    ctor = {"mobilenetv2": keras.applications.MobileNetV2, "inceptionv3": keras.applications.InceptionV3}[name]
    model = ctor(weights=None, input_shape=CORPUS[name])
    savers = {"tf_saved_model": lambda d: tf.saved_model.save(model, d),
              "export": lambda d: model.export(d, verbose=False)}
    for style, save in savers.items():
        tmp_dir = Path(tempfile.mkdtemp(prefix=f".{paths[style].name}.", dir=out_dir))
        save(str(tmp_dir))
        if paths[style].exists():
            shutil.rmtree(paths[style], ignore_errors=True)
        try:
            os.replace(tmp_dir, paths[style])
        except OSError:  # another process won the race; its copy is as good as ours
            shutil.rmtree(tmp_dir, ignore_errors=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{paths['counts'].name}.", dir=out_dir)
    with os.fdopen(fd, "w") as f:
        json.dump({"count_params": int(model.count_params()), "input_shape": list(CORPUS[name])}, f, indent=1)
    os.replace(tmp, paths["counts"])
    return paths


# -- the TF1-style graph ------------------------------------------------------

TF1_VARIABLES = {  # name → shape, in declaration order
    "dense1/kernel": (16, 32), "dense1/bias": (32,),
    "dense2/kernel": (32, 10), "dense2/bias": (10,),
}


def _write_tf1(out_dir: Path) -> None:
    import tensorflow as tf

    v1 = tf.compat.v1
    v1.disable_eager_execution()
    v1.disable_resource_variables()
    g = tf.Graph()
    with g.as_default():
        x = v1.placeholder(tf.float32, [None, 16], name="x")
        k1 = v1.get_variable("dense1/kernel", TF1_VARIABLES["dense1/kernel"])
        b1 = v1.get_variable("dense1/bias", TF1_VARIABLES["dense1/bias"], initializer=v1.zeros_initializer())
        k2 = v1.get_variable("dense2/kernel", TF1_VARIABLES["dense2/kernel"])
        b2 = v1.get_variable("dense2/bias", TF1_VARIABLES["dense2/bias"], initializer=v1.zeros_initializer())
        h = tf.nn.relu(tf.nn.bias_add(tf.matmul(x, k1), b1), name="dense1/relu")
        tf.identity(tf.nn.bias_add(tf.matmul(h, k2), b2), name="logits")
        init = v1.global_variables_initializer()
        v1.train.Saver()
        gd = g.as_graph_def()
        with v1.Session(graph=g) as sess:
            sess.run(init)
            frozen = v1.graph_util.convert_variables_to_constants(sess, gd, ["logits"])
    for path, data in ((out_dir / "tf1_mlp.pb", gd.SerializeToString()),
                       (out_dir / "tf1_mlp.pbtxt", str(gd).encode()),
                       (out_dir / "tf1_mlp_frozen.pb", frozen.SerializeToString())):
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=out_dir)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)


def build_tf1(out_dir: str | os.PathLike | None = None) -> dict[str, Path]:
    """Write the TF1 test graphs (in a subprocess) and return their paths.

    Returns
    -------
    dict
        ``graphdef`` (binary ``.pb``), ``pbtxt`` (text format) and ``frozen``
        (variables folded into ``Const``).
    """
    out_dir = Path(out_dir or default_out_dir())
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"graphdef": out_dir / "tf1_mlp.pb", "pbtxt": out_dir / "tf1_mlp.pbtxt",
             "frozen": out_dir / "tf1_mlp_frozen.pb"}
    if not all(p.exists() for p in paths.values()):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
        subprocess.run([sys.executable, __file__, str(out_dir), "--tf1"], check=True, env=env,
                       capture_output=True, text=True)
    return paths


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", nargs="?", default=None)
    ap.add_argument("--models", default="resnet50,vgg16", help=f"comma-separated: {','.join(MODELS)}")
    ap.add_argument("--batch", type=int, default=None, help="fix the batch dimension (default: symbolic)")
    ap.add_argument("--tf1", action="store_true", help="write the small TF1 VariableV2 graphs instead")
    ap.add_argument("--corpus", default=None, help="comma-separated: save mobilenetv2,inceptionv3 both ways instead")
    ap.add_argument("--force", action="store_true", help="rebuild existing files")
    args = ap.parse_args(argv)
    out = Path(args.out_dir or default_out_dir())
    out.mkdir(parents=True, exist_ok=True)
    if args.tf1:
        _write_tf1(out)
        return
    if args.corpus:
        for name in filter(None, args.corpus.split(",")):
            for kind, path in build_corpus(name, out, force=args.force).items():
                print(f"{name} {kind}: {path}")
        return
    for name in filter(None, args.models.split(",")):
        for kind, path in build(name, out, batch=args.batch, force=args.force).items():
            print(f"{name} {kind}: {path}")


if __name__ == "__main__":
    main()
