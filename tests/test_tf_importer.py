"""TensorFlow importers (DESIGN §2): Keras ResNet50/VGG16 GraphDefs and SavedModels, TF1 graphs."""
from __future__ import annotations

import json
import math
import os

import networkx as nx
import pytest

from dlsched.errors import ImportFailure
from tests.conftest import assert_clean_error, run_cli


def _inspect(*args):
    proc = run_cli("inspect", *map(str, args), "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.slow
def test_vgg16_cli_totals(keras_vgg16):
    s = _inspect(keras_vgg16["graphdef"])
    assert s["recv_ops"] == keras_vgg16["keras"]["variables"] == 32
    assert s["param_count"] == keras_vgg16["keras"]["count_params"] == 138_357_544
    assert s["param_bytes"] == 4 * 138_357_544
    assert f"{s['param_bytes'] / 2**20:.1f}" == "527.8"
    assert s["send_ops"] == 0 and s["compute_ops"] > 0


@pytest.mark.slow
def test_resnet50_graphdef_and_savedmodel_agree(keras_resnet50):
    from dlsched.importers.tf_importer import import_graphdef, import_saved_model

    keras = keras_resnet50["keras"]
    s = _inspect(keras_resnet50["graphdef"])
    # The inference graph reads BatchNorm moving statistics too, so every weight is a recv.
    assert s["recv_ops"] == keras["variables"] == 320
    assert s["param_count"] == keras["count_params"]
    gd = import_graphdef(keras_resnet50["graphdef"])
    sm = import_saved_model(keras_resnet50["savedmodel"])
    # The GraphDef keeps Keras's declaration order; a SavedModel lists captures in order of first use.
    assert [r.name for r in gd.recvs()] == keras["variable_names"]
    assert sorted(r.name for r in sm.recvs()) == sorted(keras["variable_names"])
    assert {r.name: (r.shape, r.bytes) for r in gd.recvs()} == {r.name: (r.shape, r.bytes) for r in sm.recvs()}
    assert sm.param_count == gd.param_count == keras["count_params"]
    assert gd.source == {"format": "graphdef", "path": str(keras_resnet50["graphdef"]), "batch": None}
    assert sm.source["format"] == "savedmodel" and sm.name == "resnet50_savedmodel" and gd.name == "resnet50"
    assert gd.recvs()[0].name == "conv1_conv/kernel" and gd.recvs()[0].shape == [7, 7, 3, 64]


def _raw_reads(path):
    """(consumer node, variable node) pairs straight from the GraphDef file."""
    from dlsched.importers.tf_importer import read_graphdef

    gd = read_graphdef(path)
    reads = {n.name: n.input[0] for n in gd.node if n.op == "ReadVariableOp"}
    return [(n.name, reads[i.split(":")[0]]) for n in gd.node for i in n.input if i.split(":")[0] in reads]


@pytest.mark.slow
def test_resnet50_inference_structure(keras_resnet50):
    from dlsched.importers.tf_importer import import_graphdef

    g = import_graphdef(keras_resnet50["graphdef"], batch=8)
    g.validate()
    for r in g.recvs():
        assert g.nx.in_degree(r.name) == 0
        assert r.bytes == 4 * r.params == 4 * math.prod(r.shape)
    pairs = _raw_reads(keras_resnet50["graphdef"])
    assert len({v for _, v in pairs}) == 320
    folded = 0
    for consumer, var in pairs:
        if consumer in g:
            assert g.nx.has_edge(var, consumer), (var, consumer)
        else:  # a Reshape of the variable alone merged into its recv, which feeds the Reshape's readers
            folded += 1
            assert g.nx.out_degree(var) > 0, (var, consumer)
    assert 0 < folded < len(pairs)
    assert not any(op.op_type in ("ReadVariableOp", "VarHandleOp", "NoOp") for op in g.compute_ops())
    assert not any(op.op_type == "Reshape" and all(g.op(p).kind == "recv" for p in g.predecessors(op.name))
                   for op in g.compute_ops())
    conv = g.op("resnet50_1/conv1_conv_1/convolution")
    assert conv.op_type == "Conv2D" and conv.output_shapes == [[8, 112, 112, 64]]
    assert conv.attrs["strides"] == [1, 2, 2, 1] and conv.attrs["padding"] == "VALID"
    assert conv.dtypes == ["float32"]
    assert [op.index for op in g.ops()] == list(range(len(g)))


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["graphdef", "savedmodel"])
def test_resnet50_training(keras_resnet50, fmt):
    from dlsched.importers.tf_importer import import_graphdef, import_saved_model

    path = keras_resnet50[fmt]
    g = (import_graphdef if fmt == "graphdef" else import_saved_model)(path, mode="training", batch=2)
    g.validate()
    keras = keras_resnet50["keras"]
    sends = g.sends()
    assert len(sends) == keras["trainable_variables"] == 214
    assert sum(s.params for s in sends) == keras["trainable_params"]
    assert len(g.recvs()) == keras["variables"]
    no_send = {r.name for r in g.recvs()} - {s.param for s in sends}
    assert no_send and all("moving_" in n for n in no_send)
    forward = {op.name for op in g.compute_ops() if op.phase == "forward"}
    backward = {op.name for op in g.compute_ops() if op.phase == "backward"}
    assert forward and backward
    for s in sends:
        assert g.nx.out_degree(s.name) == 0 and s.bytes == g.op(s.param).bytes
        producer = next(iter(g.predecessors(s.name)))
        assert g.op(producer).phase == "backward"
        users = [u for u in g.successors(s.param) if u in forward]
        assert users and any(nx.has_path(g.nx, u, s.name) for u in users)


def test_tf1_variablev2(tf1_graphs):
    from dlsched.importers.tf_importer import import_graphdef

    g = import_graphdef(tf1_graphs["graphdef"])
    g.validate()
    expected = tf1_graphs["variables"]
    assert [(r.name, tuple(r.shape), r.op_type) for r in g.recvs()] == \
        [(n, s, "VariableV2") for n, s in expected.items()]
    assert g.param_count == sum(math.prod(s) for s in expected.values())
    names = {op.name for op in g.compute_ops()}
    assert not any(n.endswith("/read") or n.startswith(("save/", "init")) or "Initializer" in n for n in names)
    assert not any(op.op_type in ("Assign", "SaveV2", "RestoreV2", "NoOp") for op in g.compute_ops())
    assert g.nx.has_edge("dense1/kernel", "MatMul") and g.nx.has_edge("dense2/bias", "BiasAdd_1")
    assert g.op("MatMul").output_shapes == [[None, 32]]
    text = import_graphdef(tf1_graphs["pbtxt"])
    assert text.fingerprint() == g.fingerprint()
    train = import_graphdef(tf1_graphs["graphdef"], mode="training", batch=4)
    train.validate()
    assert [s.name for s in train.sends()] == [f"{n}/grad" for n in expected]
    assert train.op("MatMul").output_shapes == [[4, 32]]


def test_frozen_consts(tf1_graphs):
    from dlsched.importers.tf_importer import import_graphdef

    g = import_graphdef(tf1_graphs["frozen"])
    assert [(r.name, r.op_type) for r in g.recvs()] == [(n, "Const") for n in tf1_graphs["variables"]]
    assert g.nx.has_edge("dense1/kernel", "MatMul")
    off = import_graphdef(tf1_graphs["frozen"], frozen_consts=False)
    assert off.recvs() == [] and "dense1/kernel" in off and off.op("dense1/kernel").op_type == "Const"


@pytest.mark.slow
def test_batch_and_save_round_trip(keras_resnet50, tmp_path):
    out = tmp_path / "r50.dag.json"
    s = _inspect(keras_resnet50["graphdef"], "--batch", "4", "--save", out)
    data = json.loads(out.read_text())
    assert data["source"]["batch"] == 4 and data["source"]["format"] == "graphdef"
    conv = next(o for o in data["ops"] if o["name"] == "resnet50_1/conv1_conv_1/convolution")
    assert conv["output_shapes"] == [[4, 112, 112, 64]]
    again = _inspect(out)
    assert again["fingerprint"] == s["fingerprint"] and again["param_count"] == s["param_count"]
    assert again["ops"] == s["ops"]


def test_bad_inputs_through_cli(tmp_path):
    bad = tmp_path / "random.pb"
    bad.write_bytes(os.urandom(4096))
    assert_clean_error(run_cli("inspect", bad), str(bad), "GraphDef")
    folder = tmp_path / "not_a_model"
    folder.mkdir()
    (folder / "notes.txt").write_text("hello")
    assert_clean_error(run_cli("inspect", folder), str(folder), "not a TensorFlow SavedModel")


def test_bad_inputs_in_process(tmp_path):
    from dlsched.importers.tf_importer import import_graphdef, import_saved_model

    with pytest.raises(ImportFailure, match="no such"):
        import_graphdef(tmp_path / "missing.pb")
    with pytest.raises(ImportFailure, match="saved_model.pb"):
        import_saved_model(tmp_path)
    text = tmp_path / "broken.pbtxt"
    text.write_text("node { name: 'a' op: ")
    with pytest.raises(ImportFailure, match="broken.pbtxt.*does not parse"):
        import_graphdef(text)
    empty = tmp_path / "empty.pb"
    empty.write_bytes(b"")
    with pytest.raises(ImportFailure, match="empty.pb"):
        import_graphdef(empty)
