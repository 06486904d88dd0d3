"""The Open Inference Protocol v2 gRPC messages, built at import time without protoc.

``tritonclient.grpc`` must work against ``onnxgate serve`` unmodified, so the server speaks
``inference.GRPCInferenceService`` with the messages of Triton's ``grpc_service.proto`` (KServe's
``grpc_predict_v2.proto`` has the same package, names and field numbers). We build those messages
here rather than taking them from elsewhere because:

- ``tritonclient`` is a client library; a server should not need it at run time.
- protoc output (``*_pb2.py``) checks its gencode version against the installed protobuf at import,
  and today's grpcio-tools generates for protobuf>=7 while tritonclient pins protobuf<7. A
  descriptor built in Python has no such check and runs on protobuf 4.25 through 7.x.

The schema below is a small table in proto syntax, one field a line, turned into a
``FileDescriptorProto`` and added to a *private* ``DescriptorPool``: tritonclient's ``service_pb2``
registers the same full names in the default pool, and a process may import both (the tests do).
The messages of the six core RPCs are defined, and those of Triton's model configuration and
statistics extensions (``ModelConfig``, ``ModelStatistics``). Of ``model_config.proto`` only the
fields onnxgate writes are declared, with Triton's numbers and types, so the bytes parse in
Triton's full message (tritonclient's ``model_config_pb2``); ``deploy triton`` builds its
``config.pbtxt`` from the same messages. Triton's other extras (streaming, repository, shared
memory) are not served.
"""

from __future__ import annotations

import re

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

SERVICE = "inference.GRPCInferenceService"
_PACKAGE = "inference"

# Field lines: ``[repeated] TYPE NAME = N``, ``map<string, TYPE> NAME = N`` or
# ``oneof GROUP TYPE NAME = N``. A dotted message name is nested in the message it starts with.
# Numbers, labels and types are those of tritonclient's service_pb2 (tests/serve/test_proto.py).
_SCHEMA: dict[str, str] = {
    "ServerLiveRequest": "",
    "ServerLiveResponse": "bool live = 1",
    "ServerReadyRequest": "",
    "ServerReadyResponse": "bool ready = 1",
    "ModelReadyRequest": "string name = 1; string version = 2",
    "ModelReadyResponse": "bool ready = 1",
    "ServerMetadataRequest": "",
    "ServerMetadataResponse": "string name = 1; string version = 2; repeated string extensions = 3",
    "ModelMetadataRequest": "string name = 1; string version = 2",
    "ModelMetadataResponse": """
        string name = 1; repeated string versions = 2; string platform = 3;
        repeated TensorMetadata inputs = 4; repeated TensorMetadata outputs = 5""",
    "ModelMetadataResponse.TensorMetadata": """
        string name = 1; string datatype = 2; repeated int64 shape = 3""",
    "InferParameter": """
        oneof parameter_choice bool bool_param = 1;
        oneof parameter_choice int64 int64_param = 2;
        oneof parameter_choice string string_param = 3;
        oneof parameter_choice double double_param = 4;
        oneof parameter_choice uint64 uint64_param = 5""",
    "InferTensorContents": """
        repeated bool bool_contents = 1; repeated int32 int_contents = 2;
        repeated int64 int64_contents = 3; repeated uint32 uint_contents = 4;
        repeated uint64 uint64_contents = 5; repeated float fp32_contents = 6;
        repeated double fp64_contents = 7; repeated bytes bytes_contents = 8""",
    "ModelInferRequest": """
        string model_name = 1; string model_version = 2; string id = 3;
        map<string, InferParameter> parameters = 4;
        repeated InferInputTensor inputs = 5;
        repeated InferRequestedOutputTensor outputs = 6;
        repeated bytes raw_input_contents = 7""",
    "ModelInferRequest.InferInputTensor": """
        string name = 1; string datatype = 2; repeated int64 shape = 3;
        map<string, InferParameter> parameters = 4; InferTensorContents contents = 5""",
    "ModelInferRequest.InferRequestedOutputTensor": """
        string name = 1; map<string, InferParameter> parameters = 2""",
    "ModelInferResponse": """
        string model_name = 1; string model_version = 2; string id = 3;
        map<string, InferParameter> parameters = 4;
        repeated InferOutputTensor outputs = 5;
        repeated bytes raw_output_contents = 6""",
    "ModelInferResponse.InferOutputTensor": """
        string name = 1; string datatype = 2; repeated int64 shape = 3;
        map<string, InferParameter> parameters = 4; InferTensorContents contents = 5""",
    # the model configuration extension: the fields of model_config.proto onnxgate writes
    "ModelConfigRequest": "string name = 1; string version = 2",
    "ModelConfigResponse": "ModelConfig config = 1",
    "ModelConfig": """
        string name = 1; string platform = 2; string backend = 17;
        ModelVersionPolicy version_policy = 3; int32 max_batch_size = 4;
        repeated ModelInput input = 5; repeated ModelOutput output = 6;
        ModelOptimizationPolicy optimization = 12;
        oneof scheduling_choice ModelDynamicBatching dynamic_batching = 11;
        repeated ModelInstanceGroup instance_group = 7;
        map<string, ModelParameter> parameters = 14; repeated ModelWarmup model_warmup = 16;
        ModelOperations model_operations = 18""",
    "ModelOperations": "repeated string op_library_filename = 1",
    "ModelVersionPolicy": """
        oneof policy_choice Latest latest = 1; oneof policy_choice All all = 2""",
    "ModelVersionPolicy.Latest": "uint32 num_versions = 1",
    "ModelVersionPolicy.All": "",
    "ModelTensorReshape": "repeated int64 shape = 1",
    "ModelInput": """
        string name = 1; DataType data_type = 2; repeated int64 dims = 4;
        ModelTensorReshape reshape = 5""",
    "ModelOutput": """
        string name = 1; DataType data_type = 2; repeated int64 dims = 3;
        ModelTensorReshape reshape = 5; string label_filename = 4""",
    "ModelInstanceGroup": "string name = 1; Kind kind = 4; int32 count = 2",
    "ModelQueuePolicy": "uint32 max_queue_size = 4",
    "ModelDynamicBatching": """
        uint64 max_queue_delay_microseconds = 2; ModelQueuePolicy default_queue_policy = 6""",
    "ModelOptimizationPolicy": """
        Graph graph = 1; ExecutionAccelerators execution_accelerators = 4""",
    "ModelOptimizationPolicy.Graph": "int32 level = 1",
    "ModelOptimizationPolicy.ExecutionAccelerators": """
        repeated Accelerator gpu_execution_accelerator = 1;
        repeated Accelerator cpu_execution_accelerator = 2""",
    "ModelOptimizationPolicy.ExecutionAccelerators.Accelerator": """
        string name = 1; map<string, string> parameters = 2""",
    "ModelParameter": "string string_value = 1",
    "ModelWarmup": """
        string name = 1; uint32 batch_size = 2; map<string, Input> inputs = 3; uint32 count = 4""",
    "ModelWarmup.Input": """
        DataType data_type = 1; repeated int64 dims = 2;
        oneof input_data_type bool zero_data = 3; oneof input_data_type bool random_data = 4;
        oneof input_data_type string input_data_file = 5""",
    # the statistics extension
    "ModelStatisticsRequest": "string name = 1; string version = 2",
    "ModelStatisticsResponse": "repeated ModelStatistics model_stats = 1",
    "StatisticDuration": "uint64 count = 1; uint64 ns = 2",
    "ModelStatistics": """
        string name = 1; string version = 2; uint64 last_inference = 3;
        uint64 inference_count = 4; uint64 execution_count = 5;
        InferStatistics inference_stats = 6; repeated InferBatchStatistics batch_stats = 7""",
    "InferStatistics": """
        StatisticDuration success = 1; StatisticDuration fail = 2; StatisticDuration queue = 3;
        StatisticDuration compute_input = 4; StatisticDuration compute_infer = 5;
        StatisticDuration compute_output = 6; StatisticDuration cache_hit = 7;
        StatisticDuration cache_miss = 8""",
    "InferBatchStatistics": """
        uint64 batch_size = 1; StatisticDuration compute_input = 2;
        StatisticDuration compute_infer = 3; StatisticDuration compute_output = 4""",
}

_ENUMS: dict[str, str] = {
    "DataType": """
        TYPE_INVALID TYPE_BOOL TYPE_UINT8 TYPE_UINT16 TYPE_UINT32 TYPE_UINT64 TYPE_INT8
        TYPE_INT16 TYPE_INT32 TYPE_INT64 TYPE_FP16 TYPE_FP32 TYPE_FP64 TYPE_STRING TYPE_BF16""",
    "ModelInstanceGroup.Kind": "KIND_AUTO KIND_GPU KIND_CPU KIND_MODEL",
}
"""Enums of model_config.proto: value names in order, numbered from 0 (as Triton numbers them)."""

_F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    name: getattr(_F, "TYPE_" + name.upper())
    for name in ("bool", "int32", "int64", "uint32", "uint64", "float", "double", "string", "bytes")
}
_LINE = re.compile(
    r"(?:(?P<repeated>repeated)\s+|oneof\s+(?P<oneof>\w+)\s+|map<string,\s*(?P<map>[\w.]+)>\s+)?"
    r"(?:(?P<type>[\w.]+)\s+)?(?P<name>\w+)\s*=\s*(?P<number>\d+)"
)


def _set_type(field: descriptor_pb2.FieldDescriptorProto, type_name: str, scope: str) -> None:
    """Give ``field`` a scalar type, or the full name of a message nested in ``scope`` or top level."""
    if type_name in _SCALARS:
        field.type = _SCALARS[type_name]
        return
    nested = f"{scope}.{type_name}"
    full = nested if nested in _SCHEMA or nested in _ENUMS else type_name
    field.type = _F.TYPE_ENUM if full in _ENUMS else _F.TYPE_MESSAGE
    field.type_name = f".{_PACKAGE}.{full}"


def _add_fields(msg: descriptor_pb2.DescriptorProto, path: str) -> None:
    """Fill ``msg`` from the schema entry ``path``, adding a nested entry message for each map."""
    oneofs: dict[str, int] = {}
    for line in filter(None, (part.strip() for part in _SCHEMA[path].split(";"))):
        match = _LINE.fullmatch(line)
        if match is None:
            raise ValueError(f"bad field line in {path}: {line!r}")
        field = msg.field.add(name=match["name"], number=int(match["number"]))
        field.label = _F.LABEL_REPEATED if match["repeated"] or match["map"] else _F.LABEL_OPTIONAL
        if match["map"]:
            entry = msg.nested_type.add(name=match["name"].title().replace("_", "") + "Entry")
            entry.options.map_entry = True
            entry.field.add(name="key", number=1, label=_F.LABEL_OPTIONAL, type=_F.TYPE_STRING)
            value = entry.field.add(name="value", number=2, label=_F.LABEL_OPTIONAL)
            _set_type(value, match["map"], path)
            field.type = _F.TYPE_MESSAGE
            field.type_name = f".{_PACKAGE}.{path}.{entry.name}"
        elif match["type"]:
            _set_type(field, match["type"], path)
        else:
            raise ValueError(f"field line without a type in {path}: {line!r}")
        if match["oneof"]:
            if match["oneof"] not in oneofs:
                oneofs[match["oneof"]] = len(msg.oneof_decl)
                msg.oneof_decl.add(name=match["oneof"])
            field.oneof_index = oneofs[match["oneof"]]


def _file() -> descriptor_pb2.FileDescriptorProto:
    """Build the whole schema as one proto3 file in package ``inference``."""
    file = descriptor_pb2.FileDescriptorProto(
        name="onnxgate/serve/grpc_service.proto", package=_PACKAGE, syntax="proto3"
    )
    built: dict[str, descriptor_pb2.DescriptorProto] = {}
    for path in _SCHEMA:  # parents come before their nested messages in the table
        parent, _, name = path.rpartition(".")
        siblings = built[parent].nested_type if parent else file.message_type
        built[path] = siblings.add(name=name)
    for path, values in _ENUMS.items():
        parent, _, name = path.rpartition(".")
        enum = (built[parent].enum_type if parent else file.enum_type).add(name=name)
        for number, value in enumerate(values.split()):
            enum.value.add(name=value, number=number)
    for path, msg in built.items():  # map entries go after nested messages, as protoc puts them
        _add_fields(msg, path)
    return file


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file())


def _cls(name: str) -> type[Message]:
    """Return the message class for ``inference.<name>`` from the private pool."""
    # GetMessageClass is in every protobuf we support (>=4.25); MessageFactory.GetPrototype is not
    # (removed in 6.x).
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{_PACKAGE}.{name}"))


ServerLiveRequest = _cls("ServerLiveRequest")
ServerLiveResponse = _cls("ServerLiveResponse")
ServerReadyRequest = _cls("ServerReadyRequest")
ServerReadyResponse = _cls("ServerReadyResponse")
ModelReadyRequest = _cls("ModelReadyRequest")
ModelReadyResponse = _cls("ModelReadyResponse")
ServerMetadataRequest = _cls("ServerMetadataRequest")
ServerMetadataResponse = _cls("ServerMetadataResponse")
ModelMetadataRequest = _cls("ModelMetadataRequest")
ModelMetadataResponse = _cls("ModelMetadataResponse")
InferParameter = _cls("InferParameter")
InferTensorContents = _cls("InferTensorContents")
ModelInferRequest = _cls("ModelInferRequest")
ModelInferResponse = _cls("ModelInferResponse")
ModelConfigRequest = _cls("ModelConfigRequest")
ModelConfigResponse = _cls("ModelConfigResponse")
ModelConfig = _cls("ModelConfig")
ModelStatisticsRequest = _cls("ModelStatisticsRequest")
ModelStatisticsResponse = _cls("ModelStatisticsResponse")
ModelStatistics = _cls("ModelStatistics")
StatisticDuration = _cls("StatisticDuration")
InferStatistics = _cls("InferStatistics")
InferBatchStatistics = _cls("InferBatchStatistics")
DataType = _POOL.FindEnumTypeByName(f"{_PACKAGE}.DataType")
"""``DataType.values_by_name["TYPE_FP32"].number``, ``DataType.values_by_number[11].name``."""
KIND_CPU, KIND_GPU = 2, 1
"""``ModelInstanceGroup.Kind`` values."""

METHODS: dict[str, tuple[type[Message], type[Message]]] = {
    "ServerLive": (ServerLiveRequest, ServerLiveResponse),
    "ServerReady": (ServerReadyRequest, ServerReadyResponse),
    "ModelReady": (ModelReadyRequest, ModelReadyResponse),
    "ServerMetadata": (ServerMetadataRequest, ServerMetadataResponse),
    "ModelMetadata": (ModelMetadataRequest, ModelMetadataResponse),
    "ModelInfer": (ModelInferRequest, ModelInferResponse),
    "ModelConfig": (ModelConfigRequest, ModelConfigResponse),
    "ModelStatistics": (ModelStatisticsRequest, ModelStatisticsResponse),
}
"""RPC name -> (request class, response class); the full path is ``/{SERVICE}/{name}``."""
