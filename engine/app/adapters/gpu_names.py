"""GPU names as clusters spell them -> the catalog's GPU types.

Kubernetes nodes carry NVIDIA GPU Feature Discovery's product label (``nvidia.com/gpu.product``:
``NVIDIA-A100-SXM4-80GB``, ``NVIDIA-H100-80GB-HBM3``, ``Tesla-V100-SXM2-16GB``, ``NVIDIA-L4``, with a
``-SHARED`` suffix under time-slicing); Slurm nodes a gres type (``gpu:a100:4``, ``gpu:h100-pcie:8``).
:func:`catalog_gpu_type` reads both: the family (A100, H100, H200, L4, T4, V100, ...), then the memory
(``80GB``) and the form factor (``PCIe``/``SXM``) where the catalog tells variants apart. A name it cannot
place raises ``ValueError`` (never a silent default): a wrong type would mis-price every job on the node.
"""

from __future__ import annotations

import re

from dltsched.engine.domain.model import resolve_gpu_type

# family -> (pcie, memory GiB) -> catalog id; None memory: the family's default size
_VARIANTS: dict[str, dict[tuple[bool, int | None], str]] = {
    "V100": {(False, None): "v100", (False, 16): "v100", (False, 32): "v100-32gb",
             (True, None): "v100-pcie", (True, 16): "v100-pcie", (True, 32): "v100-pcie-32gb"},
    "A100": {(False, None): "a100-40gb", (False, 40): "a100-40gb", (False, 80): "a100-80gb",
             (True, None): "a100-pcie-40gb", (True, 40): "a100-pcie-40gb", (True, 80): "a100-pcie-80gb"},
    "H100": {(False, None): "h100", (False, 80): "h100", (False, 94): "h100", (False, 96): "h100",
             (True, None): "h100-pcie", (True, 80): "h100-pcie", (True, 94): "h100-pcie"},
    "H200": {(False, None): "h200", (False, 141): "h200", (True, None): "h200", (True, 141): "h200"},
}
_PREFIXES = ("NVIDIA-TESLA-", "NVIDIA-", "TESLA-", "GEFORCE-", "QUADRO-")


def catalog_gpu_type(name: str) -> str:
    """The catalog id of a product label or gres type (``NVIDIA-A100-SXM4-80GB`` -> ``a100-80gb``).

    Raises
    ------
    ValueError
        The name is empty, a MIG slice, or no catalog type (the message lists close catalog matches).
    """
    text = str(name or "").strip()
    if not text:
        raise ValueError("empty GPU name")
    try:
        return resolve_gpu_type(text).id
    except ValueError:
        pass
    key = re.sub(r"[\s_]+", "-", text.upper())
    if "-MIG-" in key or key.endswith("-MIG"):
        raise ValueError(f"'{text}' is a MIG slice, not a whole GPU; dltsched schedules whole GPUs")
    key = re.sub(r"-SHARED$", "", key)
    while prefix := next((p for p in _PREFIXES if key.startswith(p)), None):
        key = key[len(prefix):]
    tokens = key.split("-")
    family = tokens[0]
    if family == "A10G":
        family = "A10"
    pcie = any(t.startswith("PCIE") or t == "NVL" for t in tokens[1:])
    sizes = [int(m.group(1)) for t in tokens[1:] if (m := re.fullmatch(r"(\d+)GB", t))]
    table = _VARIANTS.get(family)
    if table is not None:
        size = sizes[0] if sizes else None
        found = table.get((pcie, size)) or (table.get((pcie, None)) if size is None else None)
        if found is None:
            known = ", ".join(sorted(set(table.values())))
            raise ValueError(f"'{text}': no catalog type for a {family} with {size} GB "
                             f"({'PCIe' if pcie else 'SXM'}); known: {known}")
        return found
    for candidate in (family + ("-" + "-".join(tokens[1:]) if len(tokens) > 1 else ""), family):
        try:
            return resolve_gpu_type(candidate.lower()).id
        except ValueError:
            continue
    return resolve_gpu_type(text).id  # raises, naming close matches
