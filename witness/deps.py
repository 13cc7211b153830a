"""What the witness's routes ask for: the process's :class:`~witness.service.Witness`."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from witness.service import Witness

__all__ = ["get_witness", "WitnessDep"]


def get_witness(request: Request) -> Witness:
    return request.app.state.witness


WitnessDep = Annotated[Witness, Depends(get_witness)]
