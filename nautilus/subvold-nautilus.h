/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <glib-object.h>

G_BEGIN_DECLS

#define SUBVOLD_TYPE_PROVIDER (subvold_provider_get_type())
G_DECLARE_FINAL_TYPE(SubvoldProvider, subvold_provider, SUBVOLD, PROVIDER, GObject)

/* What Nautilus looks up in every extension module. */
void nautilus_module_initialize(GTypeModule *module);
void nautilus_module_shutdown(void);
void nautilus_module_list_types(const GType **types, int *n_types);

G_END_DECLS
