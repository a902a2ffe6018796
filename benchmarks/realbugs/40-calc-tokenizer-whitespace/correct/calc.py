"""A four-function calculator for a chat bot: ``"2 * (3 + 4.5)"`` -> ``15.0``."""

from __future__ import annotations

from dataclasses import dataclass

OPERATORS = "+-*/()"


class CalcError(ValueError):
    pass


@dataclass(frozen=True)
class Token:
    kind: str  # "num" or "op"
    text: str
    pos: int


def tokenize(source: str) -> list[Token]:
    tokens = []
    pos = 0
    while pos < len(source):
        char = source[pos]
        if char.isspace():
            pos += 1
            continue
        if char.isdigit() or char == ".":
            start = pos
            while pos < len(source) and (source[pos].isdigit() or source[pos] == "."):
                pos += 1
            tokens.append(Token("num", source[start:pos], start))
            continue
        if char in OPERATORS:
            tokens.append(Token("op", char, pos))
            pos += 1
            continue
        raise CalcError(f"unexpected {char!r} at {pos}")
    return tokens


class _Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.index = 0

    def peek(self) -> str | None:
        return self.tokens[self.index].text if self.index < len(self.tokens) else None

    def take(self) -> Token:
        if self.index >= len(self.tokens):
            raise CalcError("unexpected end of input")
        self.index += 1
        return self.tokens[self.index - 1]

    def expression(self) -> float:
        value = self.term()
        while self.peek() in ("+", "-"):
            value = value + self.term() if self.take().text == "+" else value - self.term()
        return value

    def term(self) -> float:
        value = self.factor()
        while self.peek() in ("*", "/"):
            if self.take().text == "*":
                value *= self.factor()
            else:
                divisor = self.factor()
                if divisor == 0:
                    raise CalcError("division by zero")
                value /= divisor
        return value

    def factor(self) -> float:
        token = self.take()
        if token.text == "-":
            return -self.factor()
        if token.text == "(":
            value = self.expression()
            if self.take().text != ")":
                raise CalcError(f"expected ')' after position {token.pos}")
            return value
        if token.kind == "num":
            try:
                return float(token.text)
            except ValueError:
                raise CalcError(f"bad number {token.text!r} at {token.pos}") from None
        raise CalcError(f"unexpected {token.text!r} at {token.pos}")


def evaluate(source: str) -> float:
    parser = _Parser(tokenize(source))
    value = parser.expression()
    if parser.peek() is not None:
        raise CalcError(f"unexpected {parser.peek()!r} at {parser.tokens[parser.index].pos}")
    return value
