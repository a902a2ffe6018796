"""A game leaderboard: best score per player, ranked."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Leaderboard:
    scores: dict[str, int] = field(default_factory=dict)

    def submit(self, player: str, score: int) -> bool:
        """Record a score; only a player's best counts.  True when it is a new best."""
        if score < 0:
            raise ValueError("scores are never negative")
        best = self.scores.get(player)
        if best is not None and best >= score:
            return False
        self.scores[player] = score
        return True

    def ranking(self) -> list[tuple[str, int]]:
        """(player, score), best first; ties by name so the order is stable."""
        by_name = sorted(self.scores.items())
        return sorted(by_name, key=lambda item: item[1], reverse=True)

    def top(self, n: int = 3) -> list[str]:
        return [player for player, _ in self.ranking()[:n]]

    def rank_of(self, player: str) -> int:
        """1-based position of ``player`` in the ranking."""
        for position, (name, _) in enumerate(self.ranking(), start=1):
            if name == player:
                return position
        raise KeyError(player)
