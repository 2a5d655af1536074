"""The input history: Up recalls older inputs, Down newer ones, as in a shell."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["INPUT_HISTORY_CAP", "InputHistory"]

INPUT_HISTORY_CAP = 100


class InputHistory:
    """The sent inputs, for recall with Up (older) and Down (newer).

    Like a shell: the first Up shows the newest entry, each further Up an
    older one, and Down walks back; going past the newest entry restores the
    text that was being typed before the recall began. Entries are
    de-duplicated (a re-sent input moves to the newest place) and capped.
    """

    def __init__(self, entries: Iterable[str] = (), cap: int = INPUT_HISTORY_CAP) -> None:
        self.cap = cap
        self._entries: list[str] = []  # oldest first
        self._index: int | None = None  # position while recalling
        self._draft = ""
        for entry in entries:
            self.push(entry)

    @property
    def entries(self) -> tuple[str, ...]:
        """The entries, oldest first."""
        return tuple(self._entries)

    @property
    def recalling(self) -> bool:
        """Whether Up was pressed since the last push/reset."""
        return self._index is not None

    def push(self, text: str) -> None:
        """Remember a sent input and end any recall."""
        self.reset()
        text = text.strip()
        if not text:
            return
        if text in self._entries:
            self._entries.remove(text)
        self._entries.append(text)
        del self._entries[: max(0, len(self._entries) - self.cap)]

    def add_older(self, texts: Iterable[str]) -> None:
        """Add ``texts`` (oldest first) as older than every entry so far — the
        inputs of a resumed conversation. Entries already present stay where they are."""
        self.reset()
        older: list[str] = []
        for text in texts:
            text = text.strip()
            if text and text not in self._entries:
                if text in older:
                    older.remove(text)
                older.append(text)
        self._entries[:0] = older
        del self._entries[: max(0, len(self._entries) - self.cap)]

    def reset(self) -> None:
        """Forget the recall position (the user typed something new)."""
        self._index = None
        self._draft = ""

    def older(self, current: str = "") -> str | None:
        """Up: the next older entry, or ``None`` when there is none.

        ``current`` is the text in the input; it is kept as the draft the
        first time so Down can bring it back.
        """
        if not self._entries:
            return None
        if self._index is None:
            self._draft = current
            self._index = len(self._entries) - 1
            return self._entries[self._index]
        if self._index == 0:
            return None
        self._index -= 1
        return self._entries[self._index]

    def newer(self) -> str | None:
        """Down: the next newer entry; past the newest, the saved draft;
        ``None`` when not recalling."""
        if self._index is None:
            return None
        if self._index >= len(self._entries) - 1:
            draft = self._draft
            self.reset()
            return draft
        self._index += 1
        return self._entries[self._index]
