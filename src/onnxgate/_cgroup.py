"""The CPU quota of this process's cgroup: the CPUs a container may really use.

``os.cpu_count()`` reports the host; a container limited to 1.5 CPUs by its cgroup still sees
every core, and thread pools sized from the host's count oversubscribe it. Both ``doctor``
(which reports the quota) and ``tune`` (which searches thread counts up to it) read it here.
"""

from __future__ import annotations

import math
import os
from pathlib import Path


def cgroup_quota(proc: Path = Path("/proc/self")) -> tuple[float | None, str | None]:
    """The CPU quota of this process's cgroup, v2 (``cpu.max``) or v1 (``cpu.cfs_quota_us``).

    The controllers' mount points come from ``mountinfo``, not a fixed /sys/fs/cgroup layout, so
    v1, v2 and hybrid hosts (v1 ``cpu`` beside a v2 ``unified`` mount) are all read right.
    """
    try:
        groups = (proc / "cgroup").read_text().splitlines()
        mounts = (proc / "mountinfo").read_text().splitlines()
    except OSError:
        return None, None
    paths: dict[str, str] = {}  # controller ("" for v2) -> the cgroup's path
    for line in groups:
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            paths[controller] = path
    for line in mounts:
        left, _, right = line.partition(" - ")
        fields, fstype = left.split(), right.split()
        if len(fields) < 5 or not fstype:
            continue
        root, point = fields[3], fields[4]
        if fstype[0] == "cgroup2" and "" in paths:
            quota = _read_quota(point, root, paths[""], v2=True)
        elif fstype[0] == "cgroup" and "cpu" in fstype[-1].split(",") and "cpu" in paths:
            quota = _read_quota(point, root, paths["cpu"], v2=False)
        else:
            continue
        if quota[1] is not None:
            return quota
    return None, None


def _read_quota(point: str, root: str, path: str, *, v2: bool) -> tuple[float | None, str | None]:
    relative = os.path.relpath(path, root) if path.startswith(root) else path.lstrip("/")
    # inside a container the cgroup's path may not exist under the mount: its root is the group
    for folder in (Path(point) / relative, Path(point)):
        try:
            if v2:
                file = folder / "cpu.max"
                quota, period = file.read_text().split()[:2]
                if quota == "max":
                    return None, str(file)
                return int(quota) / int(period), str(file)
            file = folder / "cpu.cfs_quota_us"
            quota_us = int(file.read_text())
            period_us = int((folder / "cpu.cfs_period_us").read_text())
            return (None if quota_us < 0 else quota_us / period_us), str(file)
        except (OSError, ValueError):
            continue
    return None, None


def usable_cpus() -> int:
    """CPUs this process may run on: the affinity mask, capped by the cgroup CPU quota."""
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        count = os.cpu_count() or 1
    quota, _ = cgroup_quota()
    if quota is not None:
        count = min(count, max(1, math.ceil(quota)))
    return max(1, count)
