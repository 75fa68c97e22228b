"""The record of what crossed the wire: every model call's request exactly as sent, the
reply and the provider's usage (``capture``), and the storage format that keeps a long
session's record small (``encoding``). The console stores and shows it
(``dashboard.record``); nothing here knows about a database."""

from .capture import (
    WireCall,
    WireLog,
    calling,
    collecting,
    note_sent,
    reply_record,
    view_record,
)
from .encoding import (
    ENCODERS,
    INLINE_MAX,
    KEYFRAME_EVERY,
    Encoded,
    RecordDecodeError,
    decode,
    digest,
    encode,
    expand_messages,
    stored_size,
)

__all__ = [
    "ENCODERS",
    "INLINE_MAX",
    "KEYFRAME_EVERY",
    "Encoded",
    "RecordDecodeError",
    "WireCall",
    "WireLog",
    "calling",
    "collecting",
    "decode",
    "digest",
    "encode",
    "expand_messages",
    "note_sent",
    "reply_record",
    "stored_size",
    "view_record",
]
