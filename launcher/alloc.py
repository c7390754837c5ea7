"""Backend strings: `<backend>:<dims>` -> ModelAllocation (DESIGN §3).

PLACEHOLDER: the parser is being written (see issue 2 §3). The dataclass below is the contract.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


class AllocationError(ValueError):
    """A backend string the grammar rejects; the message names the spec, the column and a fix."""

    def __init__(self, spec: str, message: str, column: Optional[int] = None, hint: str = ""):
        self.spec, self.column, self.hint = spec, column, hint
        where = f" column {column}:" if column is not None else ""
        text = f"{spec!r}:{where} {message}"
        if hint:
            text += f" ({hint})"
        super().__init__(text)


@dataclass(frozen=True)
class ModelAllocation:
    """Parallel sizes of one engine. world_size = dp*tp*pp*cp; e re-partitions experts inside it.

    For the MoE hybrid form, dp/tp/pp/cp describe attention and ep/etp/edp the FFN experts.
    """

    backend: str
    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1
    edp: int = 0  # 0 -> derived in __post_init__: world / (pp*etp*ep)
    hybrid: bool = False

    def __post_init__(self) -> None:
        if self.edp == 0:
            object.__setattr__(self, "edp", self.world_size // (self.pp * self.etp * self.ep))

    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def to_dict(self) -> dict:
        return {"dp": self.dp, "tp": self.tp, "pp": self.pp, "cp": self.cp,
                "ep": self.ep, "etp": self.etp, "edp": self.edp}

    def __str__(self) -> str:  # canonical text; the real one comes with the parser
        dims = "".join(f"{k}{v}" for k, v in (("d", self.dp), ("p", self.pp), ("t", self.tp),
                                              ("c", self.cp), ("e", self.ep)) if v > 1)
        return f"{self.backend}:{dims or 'd1'}"


def parse_backend(spec: str) -> ModelAllocation:
    raise NotImplementedError
