import subprocess
import sys

import numpy as np
import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from tritonclient.grpc import model_config_pb2, service_pb2

from onnxgate.serve import _proto

MESSAGES = [
    "ServerLiveRequest",
    "ServerLiveResponse",
    "ServerReadyRequest",
    "ServerReadyResponse",
    "ModelReadyRequest",
    "ModelReadyResponse",
    "ServerMetadataRequest",
    "ServerMetadataResponse",
    "ModelMetadataRequest",
    "ModelMetadataResponse",
    "InferParameter",
    "InferTensorContents",
    "ModelInferRequest",
    "ModelInferResponse",
    "ModelConfigRequest",
    "ModelStatisticsRequest",
    "ModelStatisticsResponse",
    "StatisticDuration",
    "InferStatistics",
    "InferBatchStatistics",
]
SUBSETS = [
    "ModelConfigResponse",
    "ModelStatistics",
    "ModelConfig",
    "ModelVersionPolicy",
    "ModelInput",
    "ModelOutput",
    "ModelTensorReshape",
    "ModelInstanceGroup",
    "ModelQueuePolicy",
    "ModelDynamicBatching",
    "ModelOptimizationPolicy",
    "ModelParameter",
    "ModelWarmup",
]
"""Messages of which only the fields onnxgate writes are declared."""


def is_repeated(field: FieldDescriptor) -> bool:
    # FieldDescriptor.label warns in protobuf 6.x; the is_repeated property is not in 4.x or 5.x.
    if hasattr(field, "is_repeated"):
        return field.is_repeated
    return field.label == field.LABEL_REPEATED


def assert_same_fields(ours: Descriptor, theirs: Descriptor) -> None:
    assert ours.full_name == theirs.full_name
    assert ours.GetOptions().map_entry == theirs.GetOptions().map_entry
    assert sorted(ours.fields_by_name) == sorted(theirs.fields_by_name)
    for name, their_field in theirs.fields_by_name.items():
        our_field = ours.fields_by_name[name]
        where = f"{theirs.full_name}.{name}"
        assert our_field.number == their_field.number, where
        assert our_field.type == their_field.type, where
        assert is_repeated(our_field) == is_repeated(their_field), where
        if their_field.message_type is not None:
            assert our_field.message_type.name == their_field.message_type.name, where
        their_oneof = their_field.containing_oneof
        our_oneof = our_field.containing_oneof
        assert (our_oneof and our_oneof.name) == (their_oneof and their_oneof.name), where
    assert sorted(ours.nested_types_by_name) == sorted(theirs.nested_types_by_name)
    for name, their_nested in theirs.nested_types_by_name.items():
        assert_same_fields(ours.nested_types_by_name[name], their_nested)


def assert_fields_within(ours: Descriptor, theirs: Descriptor) -> None:
    """Every field of ours is Triton's: same number, type, label, oneof, message or enum."""
    assert ours.full_name == theirs.full_name
    assert ours.GetOptions().map_entry == theirs.GetOptions().map_entry
    for name, our_field in ours.fields_by_name.items():
        where = f"{theirs.full_name}.{name}"
        their_field = theirs.fields_by_name[name]
        assert our_field.number == their_field.number, where
        assert our_field.type == their_field.type, where
        assert is_repeated(our_field) == is_repeated(their_field), where
        if their_field.message_type is not None:
            assert our_field.message_type.full_name == their_field.message_type.full_name, where
            assert_fields_within(our_field.message_type, their_field.message_type)
        if their_field.enum_type is not None:
            values = {v.name: v.number for v in their_field.enum_type.values}
            assert {v.name: v.number for v in our_field.enum_type.values} == values, where
        their_oneof = their_field.containing_oneof
        our_oneof = our_field.containing_oneof
        assert (our_oneof and our_oneof.name) == (their_oneof and their_oneof.name), where


@pytest.mark.parametrize("name", SUBSETS)
def test_extension_message_fields_are_tritons(name):
    module = service_pb2 if name.startswith(("ModelConfigR", "ModelStat")) else model_config_pb2
    theirs = module.DESCRIPTOR.message_types_by_name[name]
    ours = _proto._POOL.FindMessageTypeByName(f"inference.{name}")
    assert ours is not theirs
    assert_fields_within(ours, theirs)


@pytest.mark.parametrize("name", MESSAGES)
def test_message_matches_tritonclient(name):
    ours = getattr(_proto, name)
    assert ours.DESCRIPTOR is not getattr(service_pb2, name).DESCRIPTOR  # a separate pool
    assert_same_fields(ours.DESCRIPTOR, getattr(service_pb2, name).DESCRIPTOR)


def test_methods_match_the_tritonclient_service():
    service = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    assert _proto.SERVICE == service.full_name
    assert set(_proto.METHODS) == {
        "ServerLive",
        "ServerReady",
        "ModelReady",
        "ServerMetadata",
        "ModelMetadata",
        "ModelInfer",
        "ModelConfig",
        "ModelStatistics",
    }
    for name, (request, response) in _proto.METHODS.items():
        method = service.methods_by_name[name]
        assert request.DESCRIPTOR.full_name == method.input_type.full_name
        assert response.DESCRIPTOR.full_name == method.output_type.full_name


def test_tritonclient_request_parses_into_ours():
    raw = np.arange(6, dtype=np.float32).tobytes()
    theirs = service_pb2.ModelInferRequest(model_name="mnist", model_version="2", id="req-7")
    theirs.parameters["b"].bool_param = True
    theirs.parameters["i"].int64_param = -5
    theirs.parameters["s"].string_param = "text"
    theirs.parameters["d"].double_param = 0.25
    theirs.parameters["u"].uint64_param = 2**64 - 1
    tensor = theirs.inputs.add(name="x", datatype="FP32", shape=[2, 3])
    tensor.parameters["binary_data_size"].int64_param = len(raw)
    theirs.outputs.add(name="y").parameters["binary_data"].bool_param = True
    theirs.raw_input_contents.append(raw)

    ours = _proto.ModelInferRequest.FromString(theirs.SerializeToString())

    assert (ours.model_name, ours.model_version, ours.id) == ("mnist", "2", "req-7")
    params = ours.parameters
    assert {key: params[key].WhichOneof("parameter_choice") for key in params} == {
        "b": "bool_param",
        "i": "int64_param",
        "s": "string_param",
        "d": "double_param",
        "u": "uint64_param",
    }
    assert params["b"].bool_param is True
    assert params["i"].int64_param == -5
    assert params["s"].string_param == "text"
    assert params["d"].double_param == 0.25
    assert params["u"].uint64_param == 2**64 - 1
    (got,) = ours.inputs
    assert (got.name, got.datatype, list(got.shape)) == ("x", "FP32", [2, 3])
    assert got.parameters["binary_data_size"].int64_param == len(raw)
    assert ours.outputs[0].name == "y"
    assert ours.outputs[0].parameters["binary_data"].bool_param is True
    assert list(ours.raw_input_contents) == [raw]


def test_our_response_parses_into_tritonclient():
    raw = np.array([[1, -2]], dtype=np.int64).tobytes()
    ours = _proto.ModelInferResponse(model_name="m", model_version="1", id="req-7")
    ours.parameters["sequence_end"].bool_param = False
    out = ours.outputs.add(name="y", datatype="INT64", shape=[1, 2])
    out.parameters["note"].string_param = "ok"
    ours.outputs.add(name="words", datatype="BYTES", shape=[2]).contents.bytes_contents.extend(
        [b"a", b"bc"]
    )
    ours.raw_output_contents.append(raw)

    theirs = service_pb2.ModelInferResponse.FromString(ours.SerializeToString())

    assert (theirs.model_name, theirs.model_version, theirs.id) == ("m", "1", "req-7")
    assert theirs.parameters["sequence_end"].WhichOneof("parameter_choice") == "bool_param"
    assert [(o.name, o.datatype, list(o.shape)) for o in theirs.outputs] == [
        ("y", "INT64", [1, 2]),
        ("words", "BYTES", [2]),
    ]
    assert theirs.outputs[0].parameters["note"].string_param == "ok"
    assert list(theirs.outputs[1].contents.bytes_contents) == [b"a", b"bc"]
    assert list(theirs.raw_output_contents) == [raw]


@pytest.mark.parametrize(
    "imports",
    [
        "import onnxgate.serve._proto; from tritonclient.grpc import service_pb2",
        "from tritonclient.grpc import service_pb2; import onnxgate.serve._proto",
    ],
)
def test_importing_both_in_one_process(imports):
    # A fresh interpreter, so the order of first registration is the one under test.
    code = f"{imports}; print(onnxgate.serve._proto.ModelInferRequest(id='a').id)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "a"
