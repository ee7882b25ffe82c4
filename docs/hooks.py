"""MkDocs hooks (``hooks:`` in mkdocs.yml): the repository's own documents as site pages.

Every page is written to be read on a code host as well as on the site, so its relative links
name files of the repository (``../SPEC.md``, ``adapters.md``, ``../examples/dict_cache.py``).
On the site:

- README.md, SPEC.md and FORMAT.md, which stay at the repository's root where code, tests and
  readers cite them, are the pages ``index.md``, ``spec.md`` and ``format.md``, read from
  there (no copy in docs/);
- a link to a file that is a page of the site points at that page;
- a link to any other file of the repository becomes its path as code, once the file is found
  (the site carries no source); a link to a missing file is a warning, so ``mkdocs build
  --strict`` fails on it as it does on a broken link between pages;
- a line that is nothing but a link to a generated figure (``[...](figures/NAME.md)``, written
  by ``docs/figures.py``) is replaced by the figure itself, its header included.
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # MkDocs is imported where it runs the hooks; tests read ROOT_PAGES without it
    from mkdocs.config.defaults import MkDocsConfig
    from mkdocs.structure.files import Files
    from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
ROOT_PAGES = {"README.md": "index.md", "SPEC.md": "spec.md", "FORMAT.md": "format.md"}
LINK = re.compile(r"(?<![!\\])\[(?P<text>[^\]\n]+)\]\((?P<target>[^)\s]+)\)")
FIGURE = re.compile(r"^\[[^\]\n]+\]\((?P<target>(?:\.\./)*figures/[\w-]+\.md)\)[ \t]*$", re.M)
FENCE = re.compile(r"^(?P<fence>```|~~~).*?^(?P=fence)[ \t]*$", re.M | re.S)

log = logging.getLogger("mkdocs.plugins.radixkv")


def on_files(files: Files, /, *, config: MkDocsConfig) -> Files:
    """README.md, SPEC.md and FORMAT.md as pages, read from the repository's root."""
    from mkdocs.structure.files import File

    for source, page in ROOT_PAGES.items():
        files.append(File.generated(config, page, abs_src_path=str(ROOT / source)))
    return files


def on_page_markdown(markdown: str, /, *, page: Page, config: MkDocsConfig, files: Files) -> str:
    """The page's figures included and its links to repository files rewritten for the site,
    outside fenced code blocks."""
    source = Path(page.file.abs_src_path or DOCS / page.file.src_uri)
    here = PurePosixPath(page.file.src_uri).parent.as_posix()
    out, last = [], 0
    for block in FENCE.finditer(markdown):
        out += [_prose(markdown[last : block.start()], source, here), block.group(0)]
        last = block.end()
    out.append(_prose(markdown[last:], source, here))
    return "".join(out)


def _prose(text: str, source: Path, here: str) -> str:
    def figure(found: re.Match[str]) -> str:
        path = (source.parent / found["target"]).resolve()
        if not path.is_file():
            log.warning(f"{_shown(source)}: no figure {found['target']} (run docs/figures.py)")
            return found.group(0)
        return path.read_text().rstrip("\n")

    def link(found: re.Match[str]) -> str:
        target, text = found["target"], found["text"]
        if "://" in target or target.startswith(("#", "mailto:")):
            return found.group(0)
        path, _, anchor = target.partition("#")
        fragment = f"#{anchor}" if anchor else ""
        resolved = (source.parent / path).resolve()
        if not resolved.is_relative_to(ROOT):
            return found.group(0)  # MkDocs reports it
        name = resolved.relative_to(ROOT).as_posix()
        if name in ROOT_PAGES:
            return f"[{text}]({posixpath.relpath(ROOT_PAGES[name], here)}{fragment})"
        if name.startswith("docs/"):
            return f"[{text}]({posixpath.relpath(name.removeprefix('docs/'), here)}{fragment})"
        if not resolved.exists():
            log.warning(f"{_shown(source)}: link to {target}: no such file in the repository")
            return found.group(0)
        return text if text.strip("`") == name else f"{text} (`{name}`)"

    return LINK.sub(link, FIGURE.sub(figure, text))


def _shown(source: Path) -> str:
    return source.relative_to(ROOT).as_posix() if source.is_relative_to(ROOT) else str(source)
