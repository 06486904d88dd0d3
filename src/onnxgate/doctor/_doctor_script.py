"""Runs in a child Python for ``onnxgate doctor``: asks ONNX Runtime about itself, probes providers.

Reads a JSON request from the file named by argv[1] and writes a JSON answer to argv[2]. A
provider whose libraries crash the process takes only this child down, never doctor. It imports
nothing of onnxgate, so that it sees exactly the ONNX Runtime the caller's Python sees: the
caller's ``sys.path`` comes in the request (the child is started with PYTHONNOUSERSITE=1, which
would otherwise hide an onnxruntime installed with ``pip install --user``). For another runtime
(``doctor --runtime onnxruntime-openvino==1.24.1``) the child is that environment's Python and no
path is passed. Provider options (``precision=FP32``) come in the request too, so a provider is
judged with the options it will run with.

The probe: a one-node Add model (written by the caller) in a session on one provider, with
``session.disable_cpu_ep_fallback=1`` so that a provider which cannot take the node, or which
failed to initialise (ONNX Runtime then logs a warning and carries on with CPU), fails instead of
silently running on CPU. ONNX Runtime's own log lines (the cause, such as "libcudnn.so.9: cannot
open shared object file") go to file descriptor 2 from C++, so they are captured there.
"""

import json
import os
import sys

if __package__:
    from onnxgate.runners import _ortlog
else:  # run as a script: the log capture the settings applier uses, stdlib only, in runners/
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runners"))
    import _ortlog  # type: ignore[no-redef]


def _applier():
    """The settings applier (``runners/_session.py``): it registers plugin providers.

    Imported once ONNX Runtime is (it imports ONNX Runtime itself), the same way as ``_ortlog``.
    """
    if __package__:
        from onnxgate.runners import _session
    else:
        import _session  # type: ignore[no-redef]
    return _session


CPU = "CPUExecutionProvider"
LOG_LINES = 12


def _first_line(err):
    text = " ".join(str(err).split())
    return text[:600] if text else type(err).__name__


def _probe(ort, np, model, provider, provider_options):
    options = ort.SessionOptions()
    if provider != CPU:
        # CPU must not be disabled when it is the provider asked for (ONNX Runtime refuses that)
        options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    session_args = {"providers": [provider], "provider_options": [provider_options]}

    def run():
        answer = {
            "provider": provider,
            "session_providers": [],
            "correct": False,
            "error": None,
            "options": provider_options,
        }
        try:
            applier = _applier()
            if applier.add_devices(options, [provider], [dict(provider_options)]):
                session_args.clear()  # a plugin's provider: in the options, by device
            session = ort.InferenceSession(model, options, **session_args)
            answer["session_providers"] = list(session.get_providers())
            a = np.arange(6, dtype=np.float32).reshape(2, 3)
            b = np.full((2, 3), 0.5, dtype=np.float32)
            out = session.run(None, {"a": a, "b": b})[0]
            answer["correct"] = bool(np.array_equal(out, a + b))
        except Exception as err:  # every exception type is an answer here
            answer["error"] = _first_line(err)
        return answer

    answer, log = _ortlog.captured(run)
    log = log[-LOG_LINES:]
    answer["log"] = log
    return answer


def _library(ort, np, model, path):
    """Register one custom operator library and make a CPU session with it: ONNX Runtime's words."""

    def run():
        try:
            options = ort.SessionOptions()
            options.register_custom_ops_library(path)
            ort.InferenceSession(model, options, providers=[CPU])
        except Exception as err:  # every exception type is an answer here
            return {"path": path, "error": _first_line(err)}
        return {"path": path, "error": None}

    answer, log = _ortlog.captured(run)
    answer["log"] = log[-LOG_LINES:]
    return answer


def _info(ort):
    try:
        from onnxruntime.capi import build_and_package_info as built  # noqa: TID251
    except ImportError:  # older releases do not write it
        built = None
    get_build_info = getattr(ort, "get_build_info", None)
    return {
        "version": ort.__version__,
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "module_path": os.path.dirname(os.path.abspath(ort.__file__)),
        "package_name": getattr(built, "package_name", None),
        "cuda_version": getattr(built, "cuda_version", None) or None,
        "build_info": get_build_info() if get_build_info else None,
        "device": ort.get_device(),
        "available_providers": [*ort.get_available_providers(), *_applier().plugin_providers()],
        "all_providers": list(ort.get_all_providers()),
        "plugins_without_device": _without_device(ort),
    }


def _without_device(ort):
    """Plugin providers installed here that offer no CPU device: provider -> why, in words."""
    applier, found = _applier(), {}
    for plugin in applier.PLUGINS:
        chosen = applier.plugin_for(plugin.provider)
        if chosen is None or plugin.provider in ort.get_available_providers():
            continue
        try:
            if not applier.plugin_devices(chosen):
                refused = applier.no_device(chosen)
                found[plugin.provider] = {"message": refused.message, "hint": refused.hint}
        except applier.Refused as refused:
            found[plugin.provider] = {"message": refused.message, "hint": None}
    return found


def main():
    with open(sys.argv[1]) as handle:
        request = json.load(handle)
    # the caller's path first, so this child imports the onnxruntime the caller would
    sys.path[:] = list(dict.fromkeys(request.get("sys_path", []) + sys.path))
    (answer, import_log) = _ortlog.captured(_import)
    import_log = import_log[-LOG_LINES:]
    if isinstance(answer, str):
        answer = {"error": answer, "log": import_log}
    else:
        ort, np = answer
        answer = {"info": _info(ort), "import_log": import_log} if request.get("info") else {}
        given = request.get("provider_options") or {}
        answer["probes"] = [
            _probe(ort, np, request["model"], p, given.get(p, {})) for p in request["providers"]
        ]
        answer["libraries"] = [
            _library(ort, np, request["model"], path) for path in request.get("libraries", [])
        ]
    with open(sys.argv[2], "w") as handle:
        json.dump(answer, handle)


def _import():
    try:
        import numpy as np
        import onnxruntime as ort  # noqa: TID251 (this script runs in a child process)
    except Exception as err:
        return _first_line(err)
    return ort, np


if __name__ == "__main__":
    main()
