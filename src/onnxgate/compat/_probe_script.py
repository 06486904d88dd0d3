"""Runs inside the ONNX Runtime being probed, with nothing but that runtime and numpy installed.

Reads a JSON request from the file named by argv[1] and writes a JSON answer to argv[2]:
the runtime's version and providers, whether each listed model file loads (and the first line of
the error when it does not), and, when asked, the runtime's kernel and schema registries.
It must stay importable on every Python and ONNX Runtime release onnxgate probes, so it uses
nothing from onnxgate and only long-standing ONNX Runtime APIs.
"""

import json
import sys


def _first_line(err):
    text = str(err).strip()
    return text.splitlines()[0][:500] if text else type(err).__name__


def _try_load(ort, path, providers):
    options = ort.SessionOptions()
    options.log_severity_level = 4
    try:
        ort.InferenceSession(path, options, providers=providers)
    except Exception as err:  # the runtime raises many types; every one is an answer here
        return _first_line(err)
    return None


def _kernels(capi, available, unreadable):
    getter = getattr(capi, "get_all_opkernel_def", None)
    if getter is None:  # releases before 1.16 do not expose their kernel registry
        return None
    # Builds with these providers crash (signal 11) in get_all_opkernel_def: it asks each
    # built-in provider for its kernel registry, and theirs is null. The parent names them
    # (``no_kernel_registry`` of the runtimes registered in onnxgate.runners).
    if any(p in available for p in unreadable):
        return None
    rows = []
    for kernel in getter():
        start, end = kernel.version_range
        rows.append(
            [
                kernel.op_name,
                kernel.domain,
                kernel.provider,
                start,
                end,
                {name: list(types) for name, types in kernel.type_constraints.items()},
            ]
        )
    return rows


def _type_str(param):
    return getattr(param, "typeStr", None) or getattr(param, "type_str", "")


def _schemas(capi):
    getter = getattr(capi, "get_all_operator_schema", None)
    if getter is None:
        return []
    rows = []
    for schema in getter():
        inputs = [[_type_str(p), int(p.option)] for p in schema.inputs]
        outputs = [[_type_str(p), int(p.option)] for p in schema.outputs]
        attributes = sorted(schema.attributes)
        rows.append([schema.name, schema.domain, schema.since_version, inputs, outputs, attributes])
    return rows


def main():
    with open(sys.argv[1]) as handle:
        request = json.load(handle)
    import onnxruntime as ort  # noqa: TID251 (this script runs inside the probed runtime)
    from onnxruntime.capi import onnxruntime_pybind11_state as capi  # noqa: TID251

    providers = request.get("providers") or ["CPUExecutionProvider"]
    answer = {
        "version": ort.__version__,
        "python": sys.version.split()[0],
        "available_providers": list(ort.get_available_providers()),
        "all_providers": list(ort.get_all_providers()),
        "device": ort.get_device(),
        "loads": {path: _try_load(ort, path, providers) for path in request.get("models", [])},
    }
    if request.get("registries"):
        unreadable = request.get("no_kernel_registry") or []
        answer["kernels"] = _kernels(capi, answer["available_providers"], unreadable)
        answer["schemas"] = _schemas(capi)
    with open(sys.argv[2], "w") as handle:
        json.dump(answer, handle)


if __name__ == "__main__":
    main()
