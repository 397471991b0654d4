"""The models suite's reference engines and model choice, on a tiny model (no timing
assertions): an engine that is not installed is a note, not an error; both onnxruntime
settings give the fp32 reference; an unknown model is refused by name."""

from __future__ import annotations

import sys

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
testing = pytest.importorskip("kiln.relay.testing")

from benchmarks import models, references  # noqa: E402


def _tiny():
    model = testing.conv_bias_relu()
    name, x = testing.random_input(model)
    return model, {name: x}


@pytest.mark.parametrize("module, engine", [("openvino", "openvino"),
                                            ("iree.compiler", "iree")])
def test_missing_engine_is_reported_not_installed(monkeypatch, module, engine):
    monkeypatch.setitem(sys.modules, module, None)  # as if it were not installed
    model, feed = _tiny()
    ref = (references.openvino(model, feed, 1, "f32") if engine == "openvino"
           else references.iree(model, feed, 1))
    assert ref.run is None and ref.output is None
    assert ref.note == f"{module.split('.')[0]} not installed"


def test_iree_importer_gets_parsed_arguments_and_a_legal_opset():
    """IREE 3.x's importer ``main`` takes parsed arguments, older ones a list; models below
    opset 17 are upgraded (IREE legalizes BatchNormalization only from 17 on)."""
    seen = []

    class NewImporter:
        @staticmethod
        def parse_arguments(argv):
            return ("parsed", tuple(argv))

        main = staticmethod(seen.append)

    class OldImporter:
        main = staticmethod(seen.append)

    references._import_onnx(NewImporter, ["m.onnx"])
    references._import_onnx(OldImporter, ["m.onnx"])
    assert seen == [("parsed", ("m.onnx",)), ["m.onnx"]]
    model, _ = _tiny()
    assert references._iree_opset(model) == max(references.IREE_MIN_OPSET,
                                                 model.opset_import[0].version)


def test_onnxruntime_settings_agree():
    model, feed = _tiny()
    default = references.onnxruntime_defaults(model, feed, 1)
    nospin = references.onnxruntime_kiln_settings(model, feed, 1)
    assert "defaults" in default.label and "no spinning" in nospin.label
    np.testing.assert_array_equal(default.output, nospin.output)
    np.testing.assert_array_equal(default.run()[0], default.output)


def test_unknown_model_is_refused():
    with pytest.raises(ValueError, match="unknown model.*known: resnet18"):
        models.run(models=["vgg"], verbose=False)
    with pytest.raises(SystemExit):
        models.main(["--models", "resnet18,vgg"])


def test_throughput_is_stated_for_a_batch():
    assert models.throughput("resnet18", 8, 0.5) == "16.0 images/s; "
    assert models.throughput("bert_encoder", 4, 2.0) == "2.0 sequences/s; "
    assert models.throughput("resnet18", 1, 0.5) == ""
    with pytest.raises(SystemExit):
        models.main(["--models", "resnet18", "--batch", "0"])


@pytest.mark.slow
def test_torch_compile_references_match_and_report_their_compile_time():
    pytest.importorskip("torch")
    model, feed = _tiny()
    base = references.onnxruntime_defaults(model, feed, 1).output
    for backend in references.TORCH_COMPILE_BACKENDS:
        ref = references.torch_compile(model, feed, 1, backend)
        assert ref.run is not None and ref.note == "", ref.note
        assert ref.compile_s > 0 and f"torch.compile ({backend})" in ref.label
        np.testing.assert_allclose(ref.output, base, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_torch_compile_kiln_fallback_is_labelled(monkeypatch):
    pytest.importorskip("torch")
    from kiln.relay.frontend import torch_compile
    from kiln.relay.frontend.onnx import OpNotImplemented

    def unsupported(*args, **kwargs):
        raise OpNotImplemented("ONNX operator 'Conv' is not supported (as a test)")

    monkeypatch.setattr(torch_compile, "from_onnx", unsupported)
    model, feed = _tiny()
    ref = references.torch_compile(model, feed, 1, "kiln")
    assert ref.run is not None and "eager fallback" in ref.label
    assert ref.note.startswith("runs EAGERLY") and "'Conv'" in ref.note
    base = references.onnxruntime_defaults(model, feed, 1).output
    np.testing.assert_allclose(ref.output, base, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_a_batch_of_images_builds_and_matches_onnxruntime():
    """``--batch``: the CNNs built for several images (3x3 convolutions of a batch are not
    Winograd's, which computes one image) match onnxruntime."""
    import kiln
    from kiln import relay
    from kiln.contrib import graph_executor
    from kiln.relay.testing import compare

    model = testing.get_model("resnet18", hw=32, classes=10, batch=3)
    name, x = testing.random_input(model)
    mod, params = relay.frontend.from_onnx(model)
    with relay.build_config(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    gm.set_input(name, x)
    gm.run()
    ref = compare.onnxruntime_session(model, 1).run(None, {name: x})[0]
    assert compare.close(compare.differences(gm.get_output(0).numpy(), ref))


def test_skipped_engines_are_not_run():
    model, feed = _tiny()
    refs = references.all_references(model, feed, 1, skip=references.ENGINES)
    assert len(refs) == 2 and all("onnxruntime" in r.label.lower() for r in refs)
    with pytest.raises(ValueError, match="unknown engine.*tensorrt"):
        references.all_references(model, feed, 1, skip=["tensorrt"])
