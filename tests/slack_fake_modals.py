"""The fake Slack API's modals (trigger ids, ``views.open``/``push``/``update``), file uploads,
response URLs and Socket Mode (see :mod:`tests.slack_fake`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from tests.slack_blocks import view_problems
from tests.slack_fake_base import BOT_ID, BOT_USER, FakeState, SlackCall

TRIGGER_SECONDS = 3.0
RESPONSE_URL_USES = 5
RESPONSE_URL_SECONDS = 30 * 60


class Modals(FakeState):
    def issue_trigger(self, age: float = 0.0) -> str:
        """A trigger id as Slack puts in an interaction payload (``age`` seconds old)."""
        trigger = f"{int(time.time())}.{secrets.token_hex(6)}"
        with self._lock:
            self._triggers[trigger] = time.monotonic() - age
        return trigger

    def issue_response_url(self, age: float = 0.0) -> str:
        hook = secrets.token_hex(8)
        with self._lock:
            self._hooks[hook] = {"issued": time.monotonic() - age, "uses": 0, "posts": []}
        return f"{self.base_url}/hooks/{hook}"

    def responses(self) -> list[dict[str, Any]]:
        """What was posted to response URLs, in order."""
        with self._lock:
            posts = [p for h in self._hooks.values() for p in h["posts"]]
        return sorted(posts, key=lambda p: p["at"])

    def views(self) -> list[dict[str, Any]]:
        """Modals opened with ``views.open`` (as opened)."""
        with self._lock:
            return [dict(v) for v in self._views]

    def view(self, view_id: str) -> dict[str, Any] | None:
        """A view as it stands now (after its updates)."""
        with self._lock:
            found = self._current_views.get(view_id)
            return dict(found) if found is not None else None

    def view_updates(self) -> list[dict[str, Any]]:
        """Views as ``views.update`` set them, in order (each with its ``id`` and new ``hash``)."""
        with self._lock:
            return [dict(v) for v in self._view_updates]

    def pushed_views(self) -> list[dict[str, Any]]:
        """Modals pushed with ``views.push``."""
        with self._lock:
            return [dict(v) for v in self._pushed]

    def files(self) -> list[dict[str, Any]]:
        """Files uploaded and completed: ``id``, ``filename``, ``title``, ``content`` (the bytes
        as text), ``channel``, ``thread_ts``."""
        with self._lock:
            done = [dict(f) for f in self._files.values() if f["completed"]]
        return [
            {**f, "content": f["content"].decode("utf-8", "replace") if f["content"] else ""}
            for f in done
        ]

    def socket_send(self, envelope: Mapping[str, Any], timeout: float = 10.0) -> None:
        """Push an envelope to every open Socket Mode connection (blocking until sent)."""
        loop = self._loop
        if loop is None:
            raise RuntimeError("the fake is not running")

        async def send() -> None:
            for ws in list(self._sockets):
                await ws.send_json(dict(envelope))

        asyncio.run_coroutine_threadsafe(send(), loop).result(timeout=timeout)

    def socket_acks(self) -> list[dict[str, Any]]:
        """Messages the Socket Mode client sent back (acks carry ``envelope_id``)."""
        with self._lock:
            return [dict(a) for a in self._socket_acks]

    @property
    def socket_connections(self) -> int:
        """Socket Mode connections opened so far."""
        with self._lock:
            return self._socket_connects

    def _take_trigger(self, params: Mapping[str, Any]) -> str | None:
        """The error of a ``trigger_id`` (None: good, and used up now)."""
        trigger = params.get("trigger_id")
        with self._lock:
            issued = self._triggers.pop(str(trigger), None) if trigger else None
        if issued is None:
            return "invalid_trigger_id" if trigger else "invalid_arguments"
        if time.monotonic() - issued > TRIGGER_SECONDS:
            return "expired_trigger_id"
        return None

    def _checked_view(self, params: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(the view given, an error answer or {}), checked against the modal limits."""
        view = params.get("view")
        if isinstance(view, str):
            with contextlib.suppress(ValueError):
                view = json.loads(view)
        problems = view_problems(view)
        if problems:
            return {}, {
                "ok": False,
                "error": "invalid_arguments",
                "response_metadata": {"messages": [f"[ERROR] {p}" for p in problems]},
            }
        return dict(view) if isinstance(view, Mapping) else {}, {}

    def _new_view(self, view: dict[str, Any], **extra: Any) -> dict[str, Any]:
        """Store a new view (call it under the lock): an id and a hash."""
        opened = {
            **view,
            **extra,
            "id": f"V{len(self._current_views) + 1:08d}",
            "hash": f"{time.time():.6f}.{secrets.token_hex(4)}",
        }
        self._current_views[opened["id"]] = opened
        return opened

    def _open_view(self, params: dict[str, Any]) -> dict[str, Any]:
        return self._add_view(params, self._views)

    def _push_view(self, params: dict[str, Any]) -> dict[str, Any]:
        return self._add_view(params, self._pushed)

    def _add_view(self, params: dict[str, Any], into: list[dict[str, Any]]) -> dict[str, Any]:
        """``views.open`` / ``views.push``: a fresh trigger, a view within the limits, recorded."""
        if (error := self._take_trigger(params)) is not None:
            return {"ok": False, "error": error}
        view, problem = self._checked_view(params)
        if problem:
            return problem
        with self._lock:
            added = self._new_view(view)
            into.append(added)
        return {"ok": True, "view": added}

    def _update_view(self, params: dict[str, Any]) -> dict[str, Any]:
        view_id, external = params.get("view_id"), params.get("external_id")
        view, problem = self._checked_view(params)
        if problem:
            return problem
        with self._lock:
            if view_id:
                current = self._current_views.get(str(view_id))
            else:
                current = next(
                    (
                        v
                        for v in self._current_views.values()
                        if external and v.get("external_id") == external
                    ),
                    None,
                )
            if current is None:
                return {"ok": False, "error": "not_found"}
            given = params.get("hash")
            if given and given != current["hash"]:
                return {"ok": False, "error": "hash_conflict"}
            updated = {
                **view,
                "id": current["id"],
                "hash": f"{time.time():.6f}.{secrets.token_hex(4)}",
            }
            self._current_views[current["id"]] = updated
            self._view_updates.append(updated)
        return {"ok": True, "view": updated}

    def _upload_url(self, params: dict[str, Any]) -> dict[str, Any]:
        filename = params.get("filename")
        try:
            length = int(params.get("length") or 0)
        except ValueError:
            length = 0
        if not isinstance(filename, str) or not filename or length <= 0:
            return {"ok": False, "error": "invalid_arguments"}
        with self._lock:
            file_id = f"F{len(self._files) + 1:08d}"
            self._files[file_id] = {
                "id": file_id,
                "filename": filename,
                "length": length,
                "snippet_type": params.get("snippet_type"),
                "content": None,
                "title": None,
                "completed": False,
                "channel": None,
                "thread_ts": None,
            }
        return {"ok": True, "upload_url": f"{self.base_url}/upload/{file_id}", "file_id": file_id}

    async def _upload(self, request: web.Request) -> web.StreamResponse:
        """The upload URL: the file's bytes, raw (as slack_sdk sends them) or as a form's
        ``file``; they must be as long as ``files.getUploadURLExternal`` was told."""
        file_id = request.match_info["file"]
        if request.content_type == "multipart/form-data":
            form = await request.post()
            part = form.get("file")
            if isinstance(part, web.FileField):
                data = part.file.read()
            else:
                data = part.encode() if isinstance(part, str) else bytes(part or b"")
        else:
            data = await request.read()
        with self._lock:
            stored = self._files.get(file_id)
            status = 404 if stored is None else 200
            if stored is not None:
                if len(data) != stored["length"]:
                    status = 400
                else:
                    stored["content"] = data
        self._log(
            SlackCall(
                "upload",
                {"file_id": file_id, "length": len(data)},
                {k.lower(): v for k, v in request.headers.items()},
                status,
                {"ok": status == 200},
            )
        )
        if status != 200:
            return web.Response(status=status, text="invalid_upload")
        return web.Response(status=200, text=f"OK - {len(data)}")

    def _complete_upload(self, params: dict[str, Any]) -> dict[str, Any]:
        files = params.get("files")
        if not isinstance(files, list) or not files:
            return {"ok": False, "error": "invalid_arguments"}
        channel, thread_ts = params.get("channel_id"), params.get("thread_ts")
        if channel and (error := self._channel_error(channel)) is not None:
            return {"ok": False, "error": error}
        shared: list[dict[str, Any]] = []
        with self._lock:
            for f in files:
                stored = self._files.get(str(f.get("id"))) if isinstance(f, Mapping) else None
                if stored is None or stored["content"] is None:
                    return {"ok": False, "error": "file_not_found"}
                stored["title"] = f.get("title") or stored["filename"]
            for f in files:
                stored = self._files[str(f["id"])]
                stored.update(completed=True, channel=channel, thread_ts=thread_ts)
                shared.append(
                    {
                        "id": stored["id"],
                        "name": stored["filename"],
                        "title": stored["title"],
                        "size": stored["length"],
                    }
                )
            if channel:
                message: dict[str, Any] = {
                    "type": "message",
                    "ts": self._stamp(),
                    "user": BOT_USER,
                    "bot_id": BOT_ID,
                    "text": params.get("initial_comment") or "",
                    "blocks": [],
                    "files": shared,
                    "upload": True,
                }
                if thread_ts:
                    message["thread_ts"] = thread_ts
                self._messages.setdefault(str(channel), []).append(message)
        return {"ok": True, "files": shared}

    def _connections_open(self, _: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "url": f"ws://127.0.0.1:{self._port}/link"}

    async def _hook(self, request: web.Request) -> web.StreamResponse:
        hook = request.match_info["hook"]
        try:
            body = await request.json()
        except ValueError:
            return web.Response(status=400, text="invalid_payload")
        with self._lock:
            state = self._hooks.get(hook)
            if state is None:
                return web.Response(status=404, text="no_such_url")
            if time.monotonic() - state["issued"] > RESPONSE_URL_SECONDS:
                return web.Response(status=404, text="expired_url")
            if state["uses"] >= RESPONSE_URL_USES:
                return web.Response(status=404, text="used_url")
            state["uses"] += 1
            state["posts"].append({"hook": hook, "body": body, "at": time.time()})
        return web.Response(status=200, text="ok")

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        with self._lock:
            self._socket_connects += 1
        self._sockets.append(ws)
        await ws.send_json(
            {"type": "hello", "num_connections": 1, "connection_info": {"app_id": "A0ELICITBOT"}}
        )
        try:
            async for message in ws:
                if message.type.name == "TEXT":
                    with contextlib.suppress(ValueError), self._lock:
                        self._socket_acks.append(json.loads(message.data))
        finally:
            if ws in self._sockets:
                self._sockets.remove(ws)
        return ws

    async def _close_sockets(self) -> None:
        for ws in list(self._sockets):
            await ws.close()
