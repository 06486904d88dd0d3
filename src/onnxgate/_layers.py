"""The layer order of onnxgate's packages: the one declaration ``tools/import_layers.py`` reads.

Data flows one way (docs/architecture.md): a module may import from its own layer and the layers
below it, never from a layer above. Each entry names a package or module relative to
``onnxgate`` (``contract``, ``runners._tensorrt``, ``settings``); a module belongs to the longest
entry that names it or a package holding it, and ``__init__`` is the package root alone (the
public API, which re-exports every layer). Every module must be placed.

The tool reads this file without importing it (``ast.literal_eval`` of ``LAYERS``), so it holds
one literal and nothing else runs here. Nothing in onnxgate imports it.
"""

LAYERS: tuple[tuple[str, ...], ...] = (
    # what every layer uses: errors, files, the process, words, rendering helpers
    (
        "_version",
        "_install",
        "errors",
        "_fs",
        "_opslib",
        "_native",
        "_pathtext",
        "_cgroup",
        "_stdout",
        "_rich",
        "_words",
        "_layers",
    ),
    ("model",),
    ("data",),
    # the runner protocol and the runner factory's registry of runtime kinds: compat reads the
    # registered packages; each registration (in ``runners``) brings its own opener
    ("runners._base", "runners.runtimes", "runners._tensorrt"),
    ("compat",),
    # the shared parts every step's config is built from (session settings, feeds, tolerances)
    ("settings",),
    ("runners",),
    # the contract's read side (schema, store, signature, the sizes and TensorRT options it
    # proved): read by the judges below ``contract`` and passed by steps to runners
    ("contract_store",),
    # judge and describe
    ("check", "inspection", "_inspection_render", "compare", "placement", "doctor"),
    # record and verify
    ("contract",),
    # produce models (and their contracts)
    ("export",),
    ("perf",),
    ("quantize",),
    # the mobile and edge target: the ORT format, proven and measured (perf's workers)
    ("mobile",),
    # the web target: a web app's files proven in a headless Chromium (mobile's converter)
    ("web",),
    # live traffic's judgments: a shadow candidate against its champion (read by the registry)
    ("shadow",),
    ("registry",),
    ("gate",),
    ("serve",),
    ("deploy",),
    # the public API re-exports all of the above
    ("__init__",),
    ("cli", "__main__", "examples"),
)
"""Bottom layer first."""
