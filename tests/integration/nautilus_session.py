#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The user's side of test_nautilus_gui: runs inside the user's desktop
session (dbus-run-session, Xvfb), starts Nautilus, and reads and drives it
through the accessibility tree (AT-SPI), as a screen reader would.  It
knows nothing of the truth: it writes what it read, as JSON, for the test
to check, and a screenshot of each step.

usage: nautilus_session.py OUT.json SHOTS_DIR FOLDER PROPERTIES_OF VERSIONS_OF DELETED_IN

/usr/bin/python3: pyatspi comes from Debian's python3-pyatspi."""

import json
import os
import subprocess
import sys
import time

import pyatspi

DEADLINE = 120  # seconds for any one thing to appear; nothing here measures time


def wait(what, find, timeout=DEADLINE):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            found = find()
        except Exception:  # noqa: BLE001 -- a widget that went away meanwhile: look again
            found = None
        if found:
            return found
        time.sleep(0.1)
    raise SystemExit(f"timed out waiting for {what}\n" + dump_all())


def children(o):
    try:
        return [o.getChildAtIndex(i) for i in range(o.childCount)]
    except Exception:  # noqa: BLE001
        return []


def walk(o, depth=0):
    yield o
    if depth < 60:
        for c in children(o):
            if c is not None:
                yield from walk(c, depth + 1)


def role(o):
    try:
        return o.getRoleName()
    except Exception:  # noqa: BLE001
        return ""


def dump(o, depth=0):
    lines = [f"{'  ' * depth}{role(o)} {o.name!r}"]
    if depth < 60:
        for c in children(o):
            if c is not None:
                lines.append(dump(c, depth + 1))
    return "\n".join(lines)


def dump_all():
    return "\n".join(dump(app) for app in children(pyatspi.Registry.getDesktop(0)) if app is not None)


def app(name):
    return next((a for a in children(pyatspi.Registry.getDesktop(0)) if a is not None and a.name == name), None)


def text(o):
    """A label's text (its accessible name is the widget's type name when
    the text is empty)."""
    try:
        t = o.queryText()
        return t.getText(0, t.characterCount)
    except Exception:  # noqa: BLE001 -- no Text interface: the name is all there is
        return "" if o.name == "GtkLabel" else o.name


def labels(o):
    return [text(x) for x in walk(o) if role(x) == "label"]


def shot(name):
    subprocess.run(["import", "-window", "root", os.path.join(SHOTS, name + ".png")], check=True)


def click(o):
    """Clicks @o through its accessible action (what a screen reader's user
    does), or with the pointer at its middle."""
    action = o.queryAction()
    for i in range(action.nActions):
        if action.getName(i) in ("click", "activate", "press"):
            action.doAction(i)
            return
    pointer(o, "b1c")


def pointer(o, event):
    x, y, w, h = o.queryComponent().getExtents(pyatspi.DESKTOP_COORDS)
    pyatspi.Registry.generateMouseEvent(x + w // 2, y + h // 2, event)


# ---------------------------------------------------------------- the list view

def list_view(window):
    return next((o for o in walk(window) if role(o) == "tree table"), None)


def table(window):
    """The list view: its column titles and, by file name, each row's cell
    texts in the columns' order."""
    view = list_view(window)
    if not view:
        return None
    titles = [l for t in children(view) if role(t) == "table row" for l in labels(t)]
    rows = {}
    for o in walk(view):
        if role(o) == "table row" and o.name != "GtkListItemWidget":
            cells = [" ".join(labels(c)) for c in children(o) if role(c) == "table cell"]
            if cells:
                rows[cells[0]] = cells
    return titles, rows


def nautilus_window(folder_name):
    n = app("org.gnome.Nautilus")
    return next((w for w in children(n) if role(w) == "frame" and w.name == folder_name), None) if n else None


def read_columns(folder):
    window = wait("the Nautilus window", lambda: nautilus_window(os.path.basename(folder)))

    def filled():
        t = table(window)
        # Every file is on btrfs: done when every row has its subvolume.
        if not t or "Subvolume" not in t[0] or not t[1]:
            return None
        i = t[0].index("Subvolume")
        return t if all(len(r) > i and r[i] for r in t[1].values()) else None

    titles, rows = wait("the subvolume columns", filled)
    return dict(titles=titles, rows=rows)


# ---------------------------------------------------------------- properties

def read_properties(path):
    subprocess.run(["gdbus", "call", "--session", "--dest", "org.freedesktop.FileManager1", "--object-path",
                    "/org/freedesktop/FileManager1", "--method", "org.freedesktop.FileManager1.ShowItemProperties",
                    f"['file://{path}']", ""], check=True, stdout=subprocess.DEVNULL)
    n = app("org.gnome.Nautilus")
    window = wait("the properties window", lambda: next((w for w in children(n) if w.name == "Properties"), None))
    row = wait("the Subvolume row", lambda: next((o for o in walk(window) if o.name == "Subvolume"
                                                   and role(o) in ("list item", "row", "table row", "push button")), None))
    shot("properties")
    click(row)

    def section():
        texts = labels(window)
        if "df: available" not in texts or "Filesystem" not in texts:
            return None
        return texts

    texts = wait("the Subvolume section", section)
    shot("properties-subvolume")
    return texts


# ---------------------------------------------------------------- previous versions

def open_previous_versions(path):
    """Selects @path in a Nautilus window (FileManager1.ShowItems), opens
    its context menu and picks "Previous Versions…"."""
    subprocess.run(["gdbus", "call", "--session", "--dest", "org.freedesktop.FileManager1", "--object-path",
                    "/org/freedesktop/FileManager1", "--method", "org.freedesktop.FileManager1.ShowItems",
                    f"['file://{path}']", ""], check=True, stdout=subprocess.DEVNULL)
    name = os.path.basename(path)
    window = wait("the folder window", lambda: nautilus_window(os.path.basename(os.path.dirname(path))))
    row = wait(f"the row of {name}", lambda: next((o for o in walk(list_view(window) or window)
                                                   if role(o) == "table row" and labels(o)[:1] == [name]), None))
    pointer(row, "b3c")
    item = wait("the Previous Versions menu item",
                lambda: next((o for o in walk(app("org.gnome.Nautilus")) if o.name == "Previous Versions…"
                              and role(o) in ("menu item", "push button", "check menu item")), None))
    click(item)


def versions_window(path):
    title = f"Previous Versions of {path}"
    return wait(f"the window {title}", lambda: next(
        (w for a in children(pyatspi.Registry.getDesktop(0)) if a is not None for w in children(a)
         if w.name == title), None))


def version_rows(window):
    """Each row's label texts, and its Open and Restore buttons."""
    rows = []
    for o in walk(window):
        buttons = {c.name: c for c in walk(o) if role(c) == "push button"}
        if role(o) in ("list item", "row", "table row") and "Open" in buttons:
            rows.append((labels(o), buttons))
    return rows


def status(window):
    return labels(window)[-1]


def read_versions(path, restore_row, open_row, shot_name):
    window = versions_window(path)
    rows = wait("the versions", lambda: not status(window).startswith("Looking") and version_rows(window)
                or (status(window).startswith("No ") and [None]))
    rows = [r for r in rows if r]
    shot(shot_name)
    result = dict(rows=[texts for texts, _ in rows], status=status(window))
    if restore_row is not None:
        click(rows[restore_row][1]["Restore a copy"])
        result["restored"] = wait("the restore", lambda: status(window).startswith(("Restored", "Cannot", "Only"))
                                  and status(window))
    if open_row is not None:
        click(rows[open_row][1]["Open"])
        result["opened"] = wait("the open", lambda: status(window).startswith(("Opened", "Cannot", "Only"))
                                and status(window))
        shot(shot_name + "-opened")
    return result


def main():
    global SHOTS
    out, SHOTS, folder, properties_of, versions_of, deleted_in = sys.argv[1:]
    nautilus = subprocess.Popen(["nautilus", "--new-window", folder])
    result = {}
    try:
        result["columns"] = read_columns(folder)
        shot("list-view")
        result["properties"] = read_properties(properties_of)
        open_previous_versions(versions_of)
        result["versions"] = read_versions(versions_of, 0, 0, "previous-versions")
        open_previous_versions(deleted_in)
        result["deleted"] = read_versions(deleted_in, 0, None, "deleted-files")
    finally:
        with open(out, "w") as f:
            json.dump(result, f, indent=1)
        subprocess.run(["nautilus", "--quit"])
        try:
            nautilus.wait(60)
        except subprocess.TimeoutExpired:
            nautilus.kill()
            nautilus.wait()


if __name__ == "__main__":
    main()
