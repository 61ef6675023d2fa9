"""Makes the package `distill_tools` importable without installing it, for a machine where pip
cannot install (a bare GPU host with its own Python): builds DEST/distill_tools from symbolic links
that follow pyproject.toml's folder map, so `PYTHONPATH=DEST` imports exactly what the editable
install in .venv imports.

  python3 python/link_package.py DEST && export PYTHONPATH=DEST

Errors: exits 2 naming the folder when DEST/distill_tools exists and is not a link tree made here,
or when pyproject.toml maps a package to a missing folder.
"""
import os
import sys
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARK = ".linked-by-link_package"


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: link_package.py DEST")
    dest = os.path.abspath(sys.argv[1])
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        folders = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
    top = os.path.join(dest, "distill_tools")
    if os.path.exists(top) and not os.path.exists(os.path.join(top, MARK)):
        print(f"link_package: {top} exists and was not made here; remove it or pick another DEST", file=sys.stderr)
        sys.exit(2)
    for package, folder in sorted(folders.items()):
        source = os.path.join(ROOT, folder)
        if not os.path.isdir(source):
            print(f"link_package: pyproject.toml maps {package} to {folder}, which is missing", file=sys.stderr)
            sys.exit(2)
        place = os.path.join(dest, *package.split("."))
        if package == "distill_tools":
            # a real folder (it holds the sub-packages' links), its files linked one by one
            os.makedirs(place, exist_ok=True)
            open(os.path.join(place, MARK), "w").close()
            for name in os.listdir(source):
                link = os.path.join(place, name)
                if name.endswith(".py") and not os.path.lexists(link):
                    os.symlink(os.path.join(source, name), link)
        elif not os.path.lexists(place):
            os.symlink(source, place)


if __name__ == "__main__":
    main()
