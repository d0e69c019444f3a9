/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Drives the Nautilus extension as Nautilus does, against the real
 * libnautilus-extension-4: loads the module from its file through a
 * GTypeModule, makes its provider, and hands it files through a small
 * NautilusFileInfo of its own.
 *
 *   nautilus-provider MODULE    reads commands on stdin, one a line:
 *     columns          "column\tNAME\tLABEL\tDESCRIPTION" lines
 *     info PATH        update_file_info, waiting for the callback:
 *                      "info\tSUBVOLUME\tSIZE\tEXCLUSIVE\tSNAPSHOT" ("-" for
 *                      an attribute the provider did not set)
 *     props PATH       the properties models, waited for until complete:
 *                      "model\tTITLE", then "prop\tNAME\tVALUE" lines
 *     menu PATH        "menu\tLABEL" for each item
 *     invalidated PATH waits until the provider invalidates PATH's info
 *   each answer ends with "end".  Values are g_strescape()d.  A PATH keeps
 *   its NautilusFileInfo from one command to the next. */
#include <gmodule.h>
#include <nautilus-extension.h>
#include <stdio.h>
#include <sys/stat.h>

/* ---------------------------------------------------------------- a file */

#define TEST_TYPE_FILE (test_file_get_type())
G_DECLARE_FINAL_TYPE(TestFile, test_file, TEST, FILE, GObject)

struct _TestFile {
        GObject parent;
        GFile *location;
        GHashTable *attributes;
        guint invalidated;
};

static void test_file_info_iface_init(NautilusFileInfoInterface *iface);
G_DEFINE_TYPE_WITH_CODE(TestFile, test_file, G_TYPE_OBJECT,
                        G_IMPLEMENT_INTERFACE(NAUTILUS_TYPE_FILE_INFO, test_file_info_iface_init))

static gboolean file_is_gone(NautilusFileInfo *info) {
        return FALSE;
}

static char *file_get_name(NautilusFileInfo *info) {
        return g_file_get_basename(TEST_FILE(info)->location);
}

static char *file_get_uri(NautilusFileInfo *info) {
        return g_file_get_uri(TEST_FILE(info)->location);
}

static char *file_get_uri_scheme(NautilusFileInfo *info) {
        return g_file_get_uri_scheme(TEST_FILE(info)->location);
}

static GFile *file_get_location(NautilusFileInfo *info) {
        return g_object_ref(TEST_FILE(info)->location);
}

static GFileType file_get_file_type(NautilusFileInfo *info) {
        return g_file_query_file_type(TEST_FILE(info)->location, G_FILE_QUERY_INFO_NOFOLLOW_SYMLINKS, NULL);
}

static gboolean file_is_directory(NautilusFileInfo *info) {
        return file_get_file_type(info) == G_FILE_TYPE_DIRECTORY;
}

static void file_add_string_attribute(NautilusFileInfo *info, const char *name, const char *value) {
        g_hash_table_insert(TEST_FILE(info)->attributes, g_strdup(name), g_strdup(value));
}

static char *file_get_string_attribute(NautilusFileInfo *info, const char *name) {
        return g_strdup(g_hash_table_lookup(TEST_FILE(info)->attributes, name));
}

/* As Nautilus does: what extensions added is dropped, to be asked again. */
static void file_invalidate_extension_info(NautilusFileInfo *info) {
        g_hash_table_remove_all(TEST_FILE(info)->attributes);
        TEST_FILE(info)->invalidated++;
}

static void test_file_info_iface_init(NautilusFileInfoInterface *iface) {
        iface->is_gone = file_is_gone;
        iface->get_name = file_get_name;
        iface->get_uri = file_get_uri;
        iface->get_activation_uri = file_get_uri;
        iface->get_uri_scheme = file_get_uri_scheme;
        iface->get_location = file_get_location;
        iface->get_file_type = file_get_file_type;
        iface->is_directory = file_is_directory;
        iface->add_string_attribute = file_add_string_attribute;
        iface->get_string_attribute = file_get_string_attribute;
        iface->invalidate_extension_info = file_invalidate_extension_info;
}

static void test_file_finalize(GObject *object) {
        TestFile *self = TEST_FILE(object);
        g_object_unref(self->location);
        g_hash_table_destroy(self->attributes);
        G_OBJECT_CLASS(test_file_parent_class)->finalize(object);
}

static void test_file_init(TestFile *self) {
        self->attributes = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
}

static void test_file_class_init(TestFileClass *klass) {
        G_OBJECT_CLASS(klass)->finalize = test_file_finalize;
}

/* ---------------------------------------------------------------- the module, as Nautilus loads it */

#define TEST_TYPE_MODULE (test_module_get_type())
G_DECLARE_FINAL_TYPE(TestModule, test_module, TEST, MODULE, GTypeModule)

struct _TestModule {
        GTypeModule parent;
        char *path;
        GModule *library;
        void (*initialize)(GTypeModule *module);
        void (*shutdown)(void);
        void (*list_types)(const GType **types, int *n_types);
};

G_DEFINE_TYPE(TestModule, test_module, G_TYPE_TYPE_MODULE)

static gboolean test_module_load(GTypeModule *module) {
        TestModule *self = TEST_MODULE(module);

        self->library = g_module_open(self->path, G_MODULE_BIND_LAZY | G_MODULE_BIND_LOCAL);
        if (!self->library || !g_module_symbol(self->library, "nautilus_module_initialize", (gpointer *) &self->initialize) ||
            !g_module_symbol(self->library, "nautilus_module_shutdown", (gpointer *) &self->shutdown) ||
            !g_module_symbol(self->library, "nautilus_module_list_types", (gpointer *) &self->list_types)) {
                g_printerr("%s: %s\n", self->path, g_module_error());
                return FALSE;
        }
        self->initialize(module);
        return TRUE;
}

static void test_module_unload(GTypeModule *module) {
        TestModule *self = TEST_MODULE(module);
        self->shutdown();
        g_module_close(self->library);
}

static void test_module_init(TestModule *self) {
}

static void test_module_class_init(TestModuleClass *klass) {
        G_TYPE_MODULE_CLASS(klass)->load = test_module_load;
        G_TYPE_MODULE_CLASS(klass)->unload = test_module_unload;
}

/* ---------------------------------------------------------------- commands */

static GObject *provider;
static GHashTable *files; /* path -> TestFile */

static void print_escaped(const char *first, ...) G_GNUC_NULL_TERMINATED;
static void print_escaped(const char *first, ...) {
        va_list ap;

        fputs(first, stdout);
        va_start(ap, first);
        for (const char *s; (s = va_arg(ap, const char *));) {
                g_autofree char *e = g_strescape(s, NULL);
                printf("\t%s", e);
        }
        va_end(ap);
        putchar('\n');
}

static NautilusFileInfo *file_for(const char *path) {
        TestFile *f = g_hash_table_lookup(files, path);

        if (!f) {
                f = g_object_new(TEST_TYPE_FILE, NULL);
                f->location = g_file_new_for_path(path);
                g_hash_table_insert(files, g_strdup(path), f);
        }
        return NAUTILUS_FILE_INFO(f);
}

static gboolean completed;

static void update_complete(NautilusInfoProvider *p, NautilusOperationHandle *handle, NautilusOperationResult result,
                            gpointer data) {
        completed = TRUE;
}

static gboolean timed_out(gpointer data) {
        g_printerr("timed out waiting for %s\n", (const char *) data);
        exit(1);
}

/* Runs the main loop until *@flag, failing after a minute. */
static void wait_until(gboolean *flag, const char *what) {
        guint timeout = g_timeout_add_seconds(60, timed_out, (gpointer) what);
        while (!*flag)
                g_main_context_iteration(NULL, TRUE);
        g_source_remove(timeout);
}

static void cmd_info(const char *path) {
        NautilusFileInfo *file = file_for(path);
        GClosure *closure = g_cclosure_new(G_CALLBACK(update_complete), NULL, NULL);
        NautilusOperationHandle *handle = NULL;
        NautilusOperationResult result;
        const char *names[] = { "subvold_subvolume", "subvold_size", "subvold_exclusive", "subvold_snapshot" };
        char *values[4];

        g_closure_set_marshal(closure, g_cclosure_marshal_generic);
        completed = FALSE;
        result = nautilus_info_provider_update_file_info(NAUTILUS_INFO_PROVIDER(provider), file, closure, &handle);
        g_closure_unref(closure);
        if (result == NAUTILUS_OPERATION_IN_PROGRESS)
                wait_until(&completed, "update_file_info");
        for (int i = 0; i < 4; i++)
                values[i] = nautilus_file_info_get_string_attribute(file, names[i]);
        print_escaped("info", values[0] ?: "-", values[1] ?: "-", values[2] ?: "-", values[3] ?: "-", NULL);
        for (int i = 0; i < 4; i++)
                g_free(values[i]);
}

static gboolean has_item(GListModel *items, const char *name) {
        for (guint i = 0; i < g_list_model_get_n_items(items); i++) {
                g_autoptr(NautilusPropertiesItem) item = g_list_model_get_item(items, i);
                if (g_str_equal(nautilus_properties_item_get_name(item), name))
                        return TRUE;
        }
        return FALSE;
}

/* All there: the section says at once that the file is on no known
 * subvolume (one item), or it has the two figures that come last from
 * their own calls. */
static gboolean models_complete(GList *models) {
        for (GList *m = models; m; m = m->next) {
                GListModel *items = nautilus_properties_model_get_model(m->data);
                if (g_list_model_get_n_items(items) != 1 &&
                    !(has_item(items, "Filesystem") && has_item(items, "df: available")))
                        return FALSE;
        }
        return TRUE;
}

static void cmd_props(const char *path) {
        GList *list = g_list_append(NULL, file_for(path));
        GList *models = nautilus_properties_model_provider_get_models(NAUTILUS_PROPERTIES_MODEL_PROVIDER(provider),
                                                                      list);
        guint timeout = g_timeout_add_seconds(60, timed_out, "the properties");

        while (!models_complete(models))
                g_main_context_iteration(NULL, TRUE);
        g_source_remove(timeout);
        for (GList *m = models; m; m = m->next) {
                GListModel *items = nautilus_properties_model_get_model(m->data);
                print_escaped("model", nautilus_properties_model_get_title(m->data), NULL);
                for (guint i = 0; i < g_list_model_get_n_items(items); i++) {
                        g_autoptr(NautilusPropertiesItem) item = g_list_model_get_item(items, i);
                        print_escaped("prop", nautilus_properties_item_get_name(item),
                                      nautilus_properties_item_get_value(item), NULL);
                }
        }
        g_list_free_full(models, g_object_unref);
        g_list_free(list);
}

static void cmd_menu(const char *path) {
        GList *list = g_list_append(NULL, file_for(path));
        GList *items = nautilus_menu_provider_get_file_items(NAUTILUS_MENU_PROVIDER(provider), list);

        for (GList *i = items; i; i = i->next) {
                g_autofree char *label = NULL;
                g_object_get(i->data, "label", &label, NULL);
                print_escaped("menu", label, NULL);
        }
        g_list_free_full(items, g_object_unref);
        g_list_free(list);
}

static void cmd_invalidated(const char *path) {
        TestFile *f = TEST_FILE(file_for(path));
        gboolean done = f->invalidated > 0;
        guint timeout = g_timeout_add_seconds(60, timed_out, "an invalidation");

        while (!done) {
                g_main_context_iteration(NULL, TRUE);
                done = f->invalidated > 0;
        }
        g_source_remove(timeout);
        f->invalidated = 0;
}

static void cmd_columns(void) {
        GList *columns = nautilus_column_provider_get_columns(NAUTILUS_COLUMN_PROVIDER(provider));

        for (GList *c = columns; c; c = c->next) {
                g_autofree char *name = NULL, *label = NULL, *description = NULL;
                g_object_get(c->data, "name", &name, "label", &label, "description", &description, NULL);
                print_escaped("column", name, label, description, NULL);
        }
        g_list_free_full(columns, g_object_unref);
}

int main(int argc, char *argv[]) {
        TestModule *module;
        const GType *types;
        int n_types;
        char line[8192];

        if (argc != 2) {
                fprintf(stderr, "usage: %s MODULE\n", argv[0]);
                return 2;
        }
        module = g_object_new(TEST_TYPE_MODULE, NULL);
        module->path = argv[1];
        if (!g_type_module_use(G_TYPE_MODULE(module)))
                return 1;
        module->list_types(&types, &n_types);
        if (n_types != 1) {
                fprintf(stderr, "%d provider types\n", n_types);
                return 1;
        }
        provider = g_object_new(types[0], NULL);
        g_type_module_unuse(G_TYPE_MODULE(module));
        files = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_object_unref);

        while (fgets(line, sizeof line, stdin)) {
                char *arg;
                line[strcspn(line, "\n")] = 0;
                arg = strchr(line, ' ');
                if (arg)
                        *arg++ = 0;
                if (g_str_equal(line, "columns"))
                        cmd_columns();
                else if (g_str_equal(line, "info") && arg)
                        cmd_info(arg);
                else if (g_str_equal(line, "props") && arg)
                        cmd_props(arg);
                else if (g_str_equal(line, "menu") && arg)
                        cmd_menu(arg);
                else if (g_str_equal(line, "invalidated") && arg)
                        cmd_invalidated(arg);
                else {
                        fprintf(stderr, "bad command: %s\n", line);
                        return 2;
                }
                puts("end");
                fflush(stdout);
        }
        /* As Nautilus ends: files first, then the provider (the module
         * stays loaded: its types cannot go). */
        g_hash_table_destroy(files);
        g_object_unref(provider);
        return 0;
}
