"""handup previews as what every surface can show: the Request's context as fields, text kinds
as text (HTML as its source, never rendered), files and email composed as text, media as links."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from bot.domain.model import PreviewItem

LINK_PREVIEWS = frozenset({"image", "video", "audio", "file", "pdf"})


def context_items(document: Mapping[str, Any]) -> list[PreviewItem]:
    source = document["source"] or {}
    fields = [
        ("Risk", document["risk"]),
        ("Tool", document["tool"]),
        ("Agent", source.get("agent")),
        ("Session", source.get("session_title") or source.get("session")),
        ("Host", source.get("host")),
        ("Repository", source.get("repo")),
        ("Branch", source.get("branch")),
        ("Working directory", source.get("cwd")),
    ]
    return [PreviewItem(type="field", label=name, value=str(v)) for name, v in fields if v]


def _is_web_link(value: str | None) -> bool:
    if not value:
        return False
    parts = urlsplit(value)
    return parts.scheme in ("http", "https") and bool(parts.netloc)


def _size(size: int | None) -> str:
    return f"{size:,} bytes" if size is not None else ""


def _about(*parts: str | None) -> str:
    return ", ".join(p for p in parts if p)


def preview_items(preview: Mapping[str, Any]) -> list[PreviewItem]:
    """One handup preview as what every surface can show (media only a blob: named)."""
    kind = preview["type"]
    label = preview.get("title") or preview.get("name")
    inline = preview.get("inline")
    if kind in ("text", "markdown", "diff", "json", "code"):
        text = inline
        before, after = preview.get("before_blob"), preview.get("after_blob")
        if text is None and kind == "diff" and (before or after):
            text = f"(diff of blob {before} → blob {after})"
        language = "json" if kind == "json" else preview.get("lang")
        return [PreviewItem(type=kind, label=label, text=text or "", language=language)]
    if kind == "html":
        return [
            PreviewItem(type="text", label=label or "HTML (shown as source)", text=inline or "")
        ]
    if kind == "files":
        lines = [
            f"{f['path']} ({_about(f.get('mime'), _size(f.get('size')))})"
            for f in preview.get("files") or []
        ]
        return [PreviewItem(type="files", label=label or "Files", text="\n".join(lines))]
    if kind == "command":
        return _command_items(preview, label)
    if kind == "email":
        return [PreviewItem(type="email", label=label or "Email draft", text=_email_text(preview))]
    if kind in LINK_PREVIEWS:
        url = inline if _is_web_link(inline) else None
        name = preview.get("name") or preview.get("entry")
        blob = preview.get("blob")
        about = _about(
            kind, name, preview.get("mime"), _size(preview.get("size")), blob and f"blob {blob}"
        )
        return [PreviewItem(type="link", label=label or kind, url=url, text=about)]
    return [PreviewItem(type="text", label=label, text=inline or "")]


def _command_items(preview: Mapping[str, Any], label: str | None) -> list[PreviewItem]:
    command = preview.get("command") or {}
    argv = command.get("argv")
    text = command.get("shell") or (shlex.join(argv) if argv else None) or preview.get("inline")
    items = [PreviewItem(type="command", label=label or "Command", text=text or "")]
    if command.get("cwd"):
        items.append(PreviewItem(type="field", label="Runs in", value=command["cwd"]))
    if command.get("env_keys"):
        items.append(
            PreviewItem(type="field", label="Environment", value=", ".join(command["env_keys"]))
        )
    return items


def _email_text(preview: Mapping[str, Any]) -> str:
    """The draft as a person reads it (``body_html`` never shown: HTML only as text)."""
    email = preview.get("email") or {}
    lines = [
        f"{name}: {value}"
        for name, value in (
            ("From", email.get("from")),
            ("To", ", ".join(email.get("to") or [])),
            ("Cc", ", ".join(email.get("cc") or [])),
            ("Bcc", ", ".join(email.get("bcc") or [])),
            ("Reply-To", email.get("reply_to")),
            ("Date", email.get("date")),
            ("Subject", email.get("subject")),
        )
        if value
    ]
    if body := email.get("body") or preview.get("inline"):
        lines += ["", body]
    if attachments := [_attachment(a) for a in email.get("attachments") or []]:
        lines += ["", "Attachments: " + "; ".join(attachments)]
    if quoted := email.get("in_reply_to"):
        who = _about(quoted.get("from"), quoted.get("date"))
        lines += ["", f"In reply to ({who}):" if who else "In reply to:"]
        lines += [f"> {line}" for line in (quoted.get("body") or "").splitlines()]
    return "\n".join(lines)


def _attachment(attachment: Mapping[str, Any]) -> str:
    about = _about(attachment.get("mime"), _size(attachment.get("size")))
    return f"{attachment['name']} ({about})" if about else str(attachment["name"])
