/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The "Previous Versions" window the Nautilus extension opens:
 *
 *   subvold-versions FILE
 *
 * lists the versions of a regular file that the snapshots of its family
 * hold (org.subvold.Subvold1.Files.ListFileVersions), or the files a
 * directory no longer has that its snapshots do (ListDeletedFiles).  Each
 * row has "Open" (a read-only copy in $XDG_RUNTIME_DIR, opened with the
 * default application) and "Restore a copy" (next to the original, named
 * with the snapshot's date, as `subvolctl restore` names it; a reflink
 * where the filesystem can, and never over an existing file).  Every
 * D-Bus call is asynchronous. */
#include <errno.h>
#include <fcntl.h>
#include <gio/gunixfdlist.h>
#include <gtk/gtk.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#define SUBVOLD_NAME "org.subvold.Subvold1"
#define MANAGER_PATH "/org/subvold/Subvold1"
#define FILES_IFACE "org.subvold.Subvold1.Files"

typedef struct {
        char *path;      /* the file or directory, as given */
        gboolean directory;
        GDBusConnection *bus;
        GtkWidget *window, *list, *status;
} App;

/* One row: a version of the file, or a deleted file of the directory. */
typedef struct {
        App *app;
        char *snapshot;  /* object path */
        guint64 snapshot_time;
        char *name;      /* deleted files: the entry's name */
} Row;

static void row_free(gpointer data) {
        Row *r = data;
        g_free(r->snapshot);
        g_free(r->name);
        g_free(r);
}

static void set_status(App *app, const char *format, ...) G_GNUC_PRINTF(2, 3);
static void set_status(App *app, const char *format, ...) {
        g_autofree char *text = NULL;
        va_list ap;

        va_start(ap, format);
        text = g_strdup_vprintf(format, ap);
        va_end(ap);
        gtk_label_set_text(GTK_LABEL(app->status), text);
}

static char *format_time(guint64 usec, const char *format) {
        g_autoptr(GDateTime) t = g_date_time_new_from_unix_local((gint64) (usec / G_USEC_PER_SEC));
        return t ? g_date_time_format(t, format) : g_strdup("?");
}

/* The file (or the directory) as an fd the Files interface accepts. */
static GUnixFDList *fd_list_for(App *app, GError **error) {
        int fd = open(app->path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | (app->directory ? O_DIRECTORY : 0));
        GUnixFDList *fds;

        if (fd < 0) {
                g_set_error(error, G_IO_ERROR, g_io_error_from_errno(errno), "%s: %s", app->path, g_strerror(errno));
                return NULL;
        }
        fds = g_unix_fd_list_new_from_array(&fd, 1);
        return fds;
}

/* Copies @src to @dst: a reflink where the filesystem can, else by
 * copy_file_range(), else read and write. */
static gboolean copy_data(int src, int dst, gboolean *reflink) {
        char buf[64 * 1024];
        ssize_t k;

        *reflink = ioctl(dst, FICLONE, src) == 0;
        if (*reflink)
                return TRUE;
        while ((k = copy_file_range(src, NULL, dst, NULL, 1 << 30, 0)) > 0)
                ;
        if (k == 0)
                return TRUE;
        while ((k = read(src, buf, sizeof buf)) > 0)
                for (ssize_t done = 0; done < k;) {
                        ssize_t w = write(dst, buf + done, (size_t) (k - done));
                        if (w < 0)
                                return FALSE;
                        done += w;
                }
        return k == 0;
}

/* Writes the version behind @src to @dest (never over an existing
 * file), with the version's mode (@mode) and times. */
static gboolean write_copy(int src, const char *dest, mode_t mode, gboolean *reflink, GError **error) {
        struct stat st;
        int out;
        gboolean ok;

        if (fstat(src, &st) < 0 || !S_ISREG(st.st_mode)) {
                g_set_error(error, G_IO_ERROR, G_IO_ERROR_NOT_REGULAR_FILE, "Only regular files can be copied.");
                return FALSE;
        }
        out = open(dest, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0600);
        if (out < 0) {
                g_set_error(error, G_IO_ERROR, g_io_error_from_errno(errno), "Cannot create %s: %s", dest,
                            g_strerror(errno));
                return FALSE;
        }
        ok = copy_data(src, out, reflink) && fchmod(out, mode == (mode_t) -1 ? st.st_mode & 07777 : mode) == 0 &&
             futimens(out, (struct timespec[]) { st.st_atim, st.st_mtim }) == 0;
        if (!ok) {
                g_set_error(error, G_IO_ERROR, g_io_error_from_errno(errno), "Cannot write %s: %s", dest,
                            g_strerror(errno));
                unlink(dest);
        }
        close(out);
        return ok;
}

/* The version's fd: OpenFileVersion or OpenDeletedFile. */
static void open_version(Row *r, GAsyncReadyCallback callback) {
        App *app = r->app;
        g_autoptr(GError) error = NULL;
        g_autoptr(GUnixFDList) fds = fd_list_for(app, &error);
        GVariant *args;

        if (!fds) {
                set_status(app, "%s", error->message);
                return;
        }
        if (r->name)
                args = g_variant_new("(h@ayo)", 0, g_variant_new_bytestring(r->name), r->snapshot);
        else
                args = g_variant_new("(ho)", 0, r->snapshot);
        g_dbus_connection_call_with_unix_fd_list(app->bus, SUBVOLD_NAME, MANAGER_PATH, FILES_IFACE,
                                                 r->name ? "OpenDeletedFile" : "OpenFileVersion", args,
                                                 G_VARIANT_TYPE("(h)"), G_DBUS_CALL_FLAGS_NONE, -1, fds, NULL,
                                                 callback, r);
}

/* The fd in a reply to open_version(), or -1 with the status set. */
static int version_fd(Row *r, GObject *source, GAsyncResult *result) {
        g_autoptr(GError) error = NULL;
        g_autoptr(GUnixFDList) fds = NULL;
        g_autoptr(GVariant) reply = g_dbus_connection_call_with_unix_fd_list_finish(G_DBUS_CONNECTION(source), &fds,
                                                                                    result, &error);
        gint32 index;
        int fd;

        if (!reply) {
                g_dbus_error_strip_remote_error(error);
                set_status(r->app, "Cannot open that version: %s", error->message);
                return -1;
        }
        g_variant_get(reply, "(h)", &index);
        fd = fds ? g_unix_fd_list_get(fds, index, &error) : -1;
        if (fd < 0)
                set_status(r->app, "Cannot open that version: no fd in the reply");
        return fd;
}

static const char *base_name(Row *r) {
        const char *slash;

        if (r->name)
                return r->name;
        slash = strrchr(r->app->path, '/');
        return slash ? slash + 1 : r->app->path;
}

static void restore_opened(GObject *source, GAsyncResult *result, gpointer data) {
        Row *r = data;
        g_autoptr(GError) error = NULL;
        g_autofree char *stamp = format_time(r->snapshot_time, "%Y-%m-%d_%H-%M-%S");
        g_autofree char *dest = NULL;
        gboolean reflink = FALSE;
        int fd = version_fd(r, source, result);

        if (fd < 0)
                return;
        /* As subvolctl restore names it: FILE.DATE next to FILE. */
        dest = r->name ? g_strdup_printf("%s/%s.%s", r->app->path, r->name, stamp)
                       : g_strdup_printf("%s.%s", r->app->path, stamp);
        if (write_copy(fd, dest, (mode_t) -1, &reflink, &error))
                set_status(r->app, "Restored as %s (%s).", dest, reflink ? "a reflink" : "copied");
        else
                set_status(r->app, "%s", error->message);
        close(fd);
}

static void launched(GObject *source, GAsyncResult *result, gpointer data) {
        g_autoptr(GError) error = NULL;

        if (!g_app_info_launch_default_for_uri_finish(result, &error))
                g_debug("no application opened the copy: %s", error->message);
}

static void open_opened(GObject *source, GAsyncResult *result, gpointer data) {
        Row *r = data;
        g_autoptr(GError) error = NULL;
        g_autofree char *stamp = format_time(r->snapshot_time, "%Y-%m-%d_%H-%M-%S");
        g_autofree char *dir = g_build_filename(g_get_user_runtime_dir(), "subvold-versions", NULL);
        g_autofree char *name = g_strdup_printf("%s (%s)", base_name(r), stamp);
        g_autofree char *dest = g_build_filename(dir, name, NULL);
        g_autofree char *uri = g_filename_to_uri(dest, NULL, NULL);
        gboolean reflink;
        int fd = version_fd(r, source, result);

        if (fd < 0)
                return;
        /* A copy of its own, read-only so that nobody takes it for the
         * file; one made earlier is the same version. */
        if (g_mkdir_with_parents(dir, 0700) < 0)
                set_status(r->app, "Cannot make %s: %s", dir, g_strerror(errno));
        else if (!g_file_test(dest, G_FILE_TEST_EXISTS) && !write_copy(fd, dest, 0444, &reflink, &error))
                set_status(r->app, "%s", error->message);
        else {
                set_status(r->app, "Opened a read-only copy: %s", dest);
                g_app_info_launch_default_for_uri_async(uri, NULL, NULL, launched, NULL);
        }
        close(fd);
}

static void open_clicked(GtkButton *button, Row *r) {
        open_version(r, open_opened);
}

static void restore_clicked(GtkButton *button, Row *r) {
        open_version(r, restore_opened);
}

static void add_row(App *app, Row *r, const char *const *cells) {
        GtkWidget *box = gtk_box_new(GTK_ORIENTATION_HORIZONTAL, 12);
        GtkWidget *open = gtk_button_new_with_label("Open");
        GtkWidget *restore = gtk_button_new_with_label("Restore a copy");

        for (; *cells; cells++) {
                GtkWidget *label = gtk_label_new(*cells);
                gtk_label_set_xalign(GTK_LABEL(label), 0);
                gtk_label_set_width_chars(GTK_LABEL(label), 10);
                gtk_box_append(GTK_BOX(box), label);
        }
        gtk_widget_set_hexpand(gtk_widget_get_last_child(box), TRUE);
        g_signal_connect(open, "clicked", G_CALLBACK(open_clicked), r);
        g_signal_connect(restore, "clicked", G_CALLBACK(restore_clicked), r);
        gtk_box_append(GTK_BOX(box), open);
        gtk_box_append(GTK_BOX(box), restore);
        g_object_set_data_full(G_OBJECT(box), "subvold-row", r, row_free);
        gtk_list_box_append(GTK_LIST_BOX(app->list), box);
}

static void versions_listed(GObject *source, GAsyncResult *result, gpointer data) {
        App *app = data;
        g_autoptr(GError) error = NULL;
        g_autoptr(GVariant) reply = g_dbus_connection_call_with_unix_fd_list_finish(G_DBUS_CONNECTION(source), NULL,
                                                                                    result, &error);
        g_autoptr(GVariantIter) entries = NULL;
        GVariant *entry;
        guint n = 0;

        if (!reply) {
                g_dbus_error_strip_remote_error(error);
                set_status(app, "No previous versions: %s", error->message);
                return;
        }
        g_variant_get(reply, "(aa{sv})", &entries);
        while ((entry = g_variant_iter_next_value(entries))) {
                Row *r = g_new0(Row, 1);
                guint64 size = 0, mtime = 0;
                gboolean current = FALSE;
                const char *name = NULL, *type = "";
                g_autofree char *when = NULL, *modified = NULL, *bytes = NULL;

                r->app = app;
                g_variant_lookup(entry, "Snapshot", "o", &r->snapshot);
                g_variant_lookup(entry, "SnapshotTime", "t", &r->snapshot_time);
                g_variant_lookup(entry, "Size", "t", &size);
                g_variant_lookup(entry, "ModificationTime", "t", &mtime);
                g_variant_lookup(entry, "SameAsCurrent", "b", &current);
                g_variant_lookup(entry, "Name", "^&ay", &name);
                g_variant_lookup(entry, "Type", "&s", &type);
                when = format_time(r->snapshot_time, "%Y-%m-%d %H:%M:%S");
                modified = format_time(mtime, "modified %Y-%m-%d %H:%M:%S");
                bytes = g_format_size(size);
                if (app->directory) {
                        r->name = g_strdup(name);
                        add_row(app, r, (const char *[]) { name ? name : "?", type, when, bytes, modified, NULL });
                } else
                        add_row(app, r, (const char *[]) { when, bytes, modified, current ? "current" : "", NULL });
                g_variant_unref(entry);
                n++;
        }
        if (app->directory)
                set_status(app, n ? "%u deleted file(s) in the snapshots." : "No deleted files in the snapshots.", n);
        else
                set_status(app, n ? "%u version(s) in the snapshots." : "No previous versions in the snapshots.", n);
}

static void bus_ready(GObject *source, GAsyncResult *result, gpointer data) {
        App *app = data;
        g_autoptr(GError) error = NULL;
        g_autoptr(GUnixFDList) fds = NULL;

        app->bus = g_bus_get_finish(result, &error);
        if (app->bus)
                fds = fd_list_for(app, &error);
        if (!fds) {
                set_status(app, "%s", error->message);
                return;
        }
        if (app->directory)
                g_dbus_connection_call_with_unix_fd_list(app->bus, SUBVOLD_NAME, MANAGER_PATH, FILES_IFACE,
                                                         "ListDeletedFiles", g_variant_new("(h)", 0),
                                                         G_VARIANT_TYPE("(aa{sv})"), G_DBUS_CALL_FLAGS_NONE, -1, fds,
                                                         NULL, versions_listed, app);
        else
                g_dbus_connection_call_with_unix_fd_list(app->bus, SUBVOLD_NAME, MANAGER_PATH, FILES_IFACE,
                                                         "ListFileVersions", g_variant_new("(ha{sv})", 0, NULL),
                                                         G_VARIANT_TYPE("(aa{sv})"), G_DBUS_CALL_FLAGS_NONE, -1, fds,
                                                         NULL, versions_listed, app);
}

static void activate(GtkApplication *gtk_app, App *app) {
        g_autofree char *title = NULL;
        GtkWidget *box = gtk_box_new(GTK_ORIENTATION_VERTICAL, 12);
        GtkWidget *scrolled = gtk_scrolled_window_new();
        GtkWidget *heading;

        title = g_strdup_printf("Previous Versions of %s", app->path);
        app->window = gtk_application_window_new(gtk_app);
        gtk_window_set_title(GTK_WINDOW(app->window), title);
        gtk_window_set_default_size(GTK_WINDOW(app->window), 760, 360);
        heading = gtk_label_new(app->directory ? "Deleted files that snapshots still hold"
                                               : "Versions in the snapshots (oldest first)");
        gtk_label_set_xalign(GTK_LABEL(heading), 0);
        app->list = gtk_list_box_new();
        gtk_list_box_set_selection_mode(GTK_LIST_BOX(app->list), GTK_SELECTION_NONE);
        gtk_scrolled_window_set_child(GTK_SCROLLED_WINDOW(scrolled), app->list);
        gtk_widget_set_vexpand(scrolled, TRUE);
        app->status = gtk_label_new("Looking for versions…");
        gtk_label_set_xalign(GTK_LABEL(app->status), 0);
        gtk_label_set_wrap(GTK_LABEL(app->status), TRUE);
        gtk_widget_set_margin_start(box, 12);
        gtk_widget_set_margin_end(box, 12);
        gtk_widget_set_margin_top(box, 12);
        gtk_widget_set_margin_bottom(box, 12);
        gtk_box_append(GTK_BOX(box), heading);
        gtk_box_append(GTK_BOX(box), scrolled);
        gtk_box_append(GTK_BOX(box), app->status);
        gtk_window_set_child(GTK_WINDOW(app->window), box);
        gtk_window_present(GTK_WINDOW(app->window));
        g_bus_get(G_BUS_TYPE_SYSTEM, NULL, bus_ready, app);
}

int main(int argc, char *argv[]) {
        g_autoptr(GtkApplication) gtk_app = NULL;
        App app = { 0 };
        struct stat st;
        int status;

        if (argc != 2) {
                g_printerr("usage: %s FILE\n", argv[0]);
                return 2;
        }
        if (stat(argv[1], &st) < 0 || !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode))) {
                g_printerr("%s: not a regular file or directory\n", argv[1]);
                return 1;
        }
        app.path = argv[1];
        app.directory = S_ISDIR(st.st_mode);
        /* One window per run: each file has its own. */
        gtk_app = gtk_application_new("org.subvold.Versions", G_APPLICATION_NON_UNIQUE);
        g_signal_connect(gtk_app, "activate", G_CALLBACK(activate), &app);
        status = g_application_run(G_APPLICATION(gtk_app), 1, argv);
        g_clear_object(&app.bus);
        return status;
}
