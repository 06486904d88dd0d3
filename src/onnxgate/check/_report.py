"""Findings, the rules that produce them, and the report that holds them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from pydantic import BaseModel, ConfigDict


class Severity(StrEnum):
    """How bad a finding is. By default only ``error`` fails a check."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        """0 for error, 1 for warning, 2 for info: lower is worse."""
        return ("error", "warning", "info").index(self.value)

    def at_least(self, other: Severity) -> bool:
        """Whether this severity is as bad as ``other`` or worse."""
        return self.rank <= other.rank


@dataclass(frozen=True)
class Rule:
    """A stable finding code with what it means and how to fix it (documented in docs/checks.md)."""

    code: str
    severity: Severity
    title: str
    fix: str
    blocks_load: bool
    """Whether a model with this finding is predicted to fail to load on the target runtime."""


_RULES = (
    # structure
    Rule("STR001", Severity.ERROR, "onnx.checker rejects the model", "Fix what the checker names; re-export with a current exporter.", False),
    Rule("STR002", Severity.ERROR, "type or shape inference fails on a node", "Fix the node's input types or shapes; the runtime runs the same inference when it loads the model.", True),
    Rule("STR003", Severity.WARNING, "nodes are not in topological order", "Sort the graph (onnx-ir or polygraphy surgeon sanitize --toposort); ONNX Runtime sorts, other consumers may not.", False),
    Rule("STR004", Severity.ERROR, "two nodes of one graph share a name", "Give every node a unique name; ONNX Runtime refuses the model, and tools that address nodes by name get confused.", True),
    Rule("STR005", Severity.ERROR, "a tensor name is produced more than once", "Rename one of the producers; every value in a graph must have a single producer.", True),
    Rule("STR006", Severity.ERROR, "a node consumes a tensor nothing produces", "Add the missing initializer or graph input, or reconnect the node.", True),
    Rule("STR007", Severity.ERROR, "a graph output is never produced", "Connect the output to the node that computes it or remove it.", True),
    Rule("STR008", Severity.WARNING, "an initializer is also listed as a graph input", "Remove it from graph.input (onnxruntime.tools remove_initializer_from_input) unless callers must override it; the runtime cannot constant-fold it.", False),
    Rule("STR009", Severity.ERROR, "the graph has a cycle", "Break the cycle; loops belong in a Loop or Scan node's body.", True),
    Rule("STR010", Severity.ERROR, "the model has no outputs", "Declare the graph outputs; a model that returns nothing cannot be served or compared.", False),
    # versions
    Rule("VER001", Severity.ERROR, "IR version newer than the target runtime loads", "Re-export for the target: `onnxgate export torch (or sklearn) ... --runtime onnxruntime==X.Y.Z` picks the IR version and opset that release loads; or set model.ir_version to the target's maximum if nothing newer is used.", True),
    Rule("VER002", Severity.ERROR, "IR version older than the target runtime loads", "Re-export the model with a current exporter.", True),
    Rule("VER003", Severity.ERROR, "ai.onnx opset newer than the target runtime loads", "Re-export for the target: `onnxgate export torch (or sklearn) ... --runtime onnxruntime==X.Y.Z` picks the opset that release loads (or pass --opset); or upgrade the runtime.", True),
    Rule("VER004", Severity.WARNING, "ai.onnx opset below 7", "Convert with onnx.version_converter to opset 7 or newer; ONNX Runtime has no kernels for most older operator versions.", False),
    Rule("VER005", Severity.ERROR, "ai.onnx.ml opset newer than the target runtime loads", "Convert with an older ai.onnx.ml target opset (skl2onnx target_opset) or upgrade the runtime.", True),
    Rule("VER006", Severity.ERROR, "a domain is used without an opset import and the runtime cannot assume one", "Add an opset_import entry for the domain; a model with no opset_import at all is refused.", True),
    Rule("VER007", Severity.WARNING, "opset newer than the installed onnx package knows", "Upgrade the onnx package so operator schemas can be checked.", False),
    Rule("VER008", Severity.WARNING, "a domain is used without an opset import; the runtime assumes its own default", "Add an opset_import entry for the domain; other consumers (onnx.checker, converters) refuse the model.", False),
    # operators
    Rule("OP001", Severity.ERROR, "no kernel for this operator version and input types", "Change the input types (Cast), export at an opset whose version of the operator has a kernel, or use a runtime release that has it.", True),
    Rule("OP002", Severity.WARNING, "the requested provider has no kernel, the node falls back", "Expect a copy to and from the fallback provider; check with 'onnxgate placement' and consider another opset or type.", False),
    Rule("OP003", Severity.ERROR, "operator from a custom domain the runtime does not know", "Register the library that implements it in every session (SessionOptions.register_custom_ops_library; onnxgate's --ops-library PATH or onnxruntime-extensions, which check then loads to see what it provides) or replace the node.", True),
    Rule("OP004", Severity.ERROR, "operator has no schema at this opset", "Check the operator name and the model's opset; the operator may not exist yet at this opset.", True),
    Rule("OP005", Severity.INFO, "operator has no kernel and runs as its function body", "Nothing to do unless speed matters: the runtime inlines the operator's definition.", False),
    Rule("OP006", Severity.ERROR, "operator is deprecated at this opset", "Replace it with the operator that superseded it (e.g. Upsample with Resize); ONNX Runtime refuses deprecated operators.", True),
    Rule("OP007", Severity.INFO, "kernel coverage was not checked", "The target release does not expose its kernel registry (releases before 1.16), or a node of a probed runtime (onnxruntime-web, onnxruntime-node) could not be built alone (a subgraph, an unknown type).", False),
    Rule("OP008", Severity.INFO, "float16 node runs in float32 on CPU", "Expect extra Cast nodes and float32 precision on CPU; a GPU provider may have the float16 kernel.", False),
    Rule("OP010", Severity.ERROR, "the node alone does not load on the target runtime, for a reason other than a missing kernel", "Read the runtime's line in the message: a rejected attribute, a shape the runtime's inference refuses, a resource the machine lacks (a locale); fix the node or the machine.", True),
    Rule("OP009", Severity.ERROR, "node uses an attribute the runtime's definition of the operator lacks", "Export at the opset the runtime implements, or drop the attribute; the runtime rejects the model as invalid.", True),
    # providers
    Rule("PRV001", Severity.ERROR, "a requested provider is not in the target runtime's build", "Install the package that provides it (onnxruntime-gpu for CUDA/TensorRT) or remove it from --providers.", False),
    Rule("PRV002", Severity.INFO, "a requested provider compiles subgraphs; its coverage is decided at session creation", "Run 'onnxgate placement' on a machine with that provider.", False),
    # shapes
    Rule("SHP001", Severity.WARNING, "an input has no dynamic batch axis", "Re-export with a dynamic first axis (torch.onnx.export dynamic_shapes / dynamic_axes) if callers batch requests.", False),
    Rule("SHP002", Severity.WARNING, "an input has no shape (unknown rank)", "Declare the input's rank and dimensions so callers and the runtime can validate feeds.", False),
    Rule("SHP003", Severity.WARNING, "an output's declared shape contradicts what the model produces", "Fix the output's declared shape in the exporter (or with onnx-ir); until then deploy from the contract's observed shape (onnxgate deploy triton writes it), not from the declaration.", False),
    # external data and size
    Rule("EXT001", Severity.INFO, "weights are kept in external data files", "Ship the listed files next to the .onnx file; the model cannot load without them.", False),
    Rule("SIZ001", Severity.WARNING, "the model file is close to protobuf's 2 GiB limit", "Save weights as external data before the model grows past the limit.", False),
)  # fmt: skip

RULES: dict[str, Rule] = {rule.code: rule for rule in _RULES}


def _escape_data(text: str) -> str:
    """Escape a GitHub workflow command's message."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    """Escape a GitHub workflow command's property value (``file=...``)."""
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


class Finding(BaseModel):
    """One problem or fact about a model, with where it is and what to do."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    code: str
    severity: Severity
    message: str
    node: str | None = None
    tensor: str | None = None
    hint: str | None = None
    blocks_load: bool = False


def finding(
    code: str,
    message: str,
    *,
    node: str | None = None,
    tensor: str | None = None,
    hint: str | None = None,
    severity: Severity | None = None,
) -> Finding:
    """A finding of a registered rule; severity and hint default to the rule's."""
    rule = RULES[code]
    return Finding(
        code=code,
        severity=severity or rule.severity,
        message=message,
        node=node,
        tensor=tensor,
        hint=hint or rule.fix,
        blocks_load=rule.blocks_load,
    )


class CheckReport(BaseModel):
    """The verdict of ``check`` on one model against one runtime."""

    model_config = ConfigDict(extra="forbid")

    model: str
    runtime: str
    providers: list[str]
    fail_on: Severity = Severity.ERROR
    """The lowest severity that fails the check."""
    passed: bool
    """No finding at or above ``fail_on``."""
    predicted_load: bool
    """Whether the target runtime is predicted to load the model and find a kernel for every node."""
    findings: list[Finding]
    counts: dict[str, int]

    @classmethod
    def build(
        cls,
        model: str,
        runtime: str,
        providers: list[str],
        findings: list[Finding],
        *,
        fail_on: Severity = Severity.ERROR,
    ) -> CheckReport:
        """Assemble a report, ordering findings by severity then code."""
        findings = sorted(findings, key=lambda f: (f.severity.rank, f.code))
        counts = {s.value: sum(f.severity == s for f in findings) for s in Severity}
        return cls(
            model=model,
            runtime=runtime,
            providers=providers,
            fail_on=fail_on,
            passed=not any(f.severity.at_least(fail_on) for f in findings),
            predicted_load=not any(f.blocks_load for f in findings),
            findings=findings,
            counts=counts,
        )

    def to_github(self) -> str:
        """GitHub Actions workflow commands, one annotation per finding."""
        kind = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}
        lines = []
        for f in self.findings:
            subject = f.node or f.tensor
            where = f" ({subject})" if subject and subject not in f.message else ""
            text = _escape_data(f"{f.message}{where}. {f.hint or ''}")
            file = _escape_property(self.model)
            lines.append(f"::{kind[f.severity]} file={file},title={f.code}::{text}")
        return "\n".join(lines)

    def to_sarif(self, tool_version: str) -> dict:
        """The report as a SARIF 2.1.0 log, for code-scanning dashboards."""
        level = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
        used = sorted({f.code for f in self.findings})
        rules = [
            {
                "id": code,
                "shortDescription": {"text": RULES[code].title},
                "help": {"text": RULES[code].fix},
                "defaultConfiguration": {"level": level[RULES[code].severity]},
            }
            for code in used
        ]
        results = []
        for f in self.findings:
            result: dict = {
                "ruleId": f.code,
                "ruleIndex": used.index(f.code),
                "level": level[f.severity],
                "message": {"text": f"{f.message} {f.hint or ''}".strip()},
                "locations": [{"physicalLocation": {"artifactLocation": {"uri": self.model}}}],
            }
            if f.node or f.tensor:
                kind = "node" if f.node else "tensor"
                result["locations"][0]["logicalLocations"] = [
                    {"name": f.node or f.tensor, "kind": kind}
                ]
            results.append(result)
        return {
            "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
            "version": "2.1.0",
            "runs": [
                {
                    "tool": {
                        "driver": {"name": "onnxgate", "version": tool_version, "rules": rules}
                    },
                    "properties": {"runtime": self.runtime, "providers": self.providers},
                    "results": results,
                }
            ],
        }
