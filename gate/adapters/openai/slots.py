"""A launched llama.cpp server's slot files: save, restore and erase a slot through the engine's own API
(`POST /slots/N?action=save|restore|erase`, files under `--slot-save-path DIR`; a completion goes to
slot N with `id_slot`). gate offers them only for a server it launched with `--slot-save-path` (a
`base_url` server's files sit on a machine gate cannot see).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gate.adapters.openai.options import flag
from gate.adapters.openai.process import died_serving
from gate.errors import EngineBadReply

if TYPE_CHECKING:
    from gate.adapters.openai.client import EngineClient
    from gate.adapters.openai.process import ServerProcess


def erase_slot(client: EngineClient, slot: int) -> Any:
    """`POST /slots/{slot}?action=erase`: llama.cpp clears the slot's KV and tokens (the reset's plumbing too)."""
    return client.post(f"/slots/{slot}?action=erase", {})


@dataclass
class LlamaSlotFiles:
    """The slot files of one launched llama.cpp server (gate.protocols.SlotStore)."""

    client: EngineClient
    server: ServerProcess
    directory: Path
    slots: int

    def _action(self, slot: int, action: str, body: dict[str, Any]) -> dict[str, Any]:
        call = f"POST /slots/{slot}?action={action}"
        with died_serving(self.server, call, slot=slot, **body):  # the server dying on it is a finding
            # never retried: a file the server chokes on is sent once
            reply = self.client.post(f"/slots/{slot}?action={action}", body, retry=False)
        if not isinstance(reply, dict):
            raise EngineBadReply(f"{call} answered {str(reply)[:120]!r}, not an object")
        if action == "restore" and self.client.history is not None:
            self.client.history.restored = True  # the slot holds tokens this process was never sent
        return reply

    def save(self, slot: int, filename: str) -> dict[str, Any]:
        return self._action(slot, "save", {"filename": filename})

    def restore(self, slot: int, filename: str) -> dict[str, Any]:
        return self._action(slot, "restore", {"filename": filename})

    def erase(self, slot: int) -> dict[str, Any]:
        return self._action(slot, "erase", {})

    def pinned(self, slot: int) -> dict[str, Any]:
        return {"id_slot": slot}


def absent(flavor: str, command: list[str] | None) -> str | None:
    """Why a server of this flavor and launch command (None: at `base_url`) offers no slot files gate reaches."""
    if flavor != "llama.cpp":
        return f"gate knows no slot save/restore API of a {flavor} server (llama.cpp's /slots has one)"
    if command is None:
        return "the server runs at base_url: its slot files sit where gate cannot read or write them"
    if not flag(command, "--slot-save-path"):
        return "the llama.cpp server was launched without --slot-save-path, so it saves and restores no slot"
    return None


def slot_files(client: EngineClient, server: ServerProcess | None) -> LlamaSlotFiles | str:
    """The running server's slot files, or why it offers none."""
    why = absent(client.flavor, None if server is None else server.command)
    if why is not None or server is None:
        return why or "no server process"
    directory = flag(server.command, "--slot-save-path")
    return LlamaSlotFiles(client, server, Path(str(directory)), int(client.info.get("total_slots") or 1))
