/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The org.subvold.Subvold1.Manager interface on /org/subvold/Subvold1. */

#include "fs-btrfs.h"
#include "manager.h"

int bus_manager_register(sd_bus *bus, Manager *m);

/* The subvolume holding the file behind a client's @fd, matched to its
 * filesystem by the full fsid, which the fd itself tells, so that a
 * filesystem made to look alike (same f_fsid fold, same subvolume id) is
 * never taken for another; what the fd said in *@ret_id (may be NULL).
 * Sets a named error otherwise. */
int bus_lookup_subvolume_by_fd(const Model *model, int fd, const Subvolume **ret, FdIdentity *ret_id,
                               sd_bus_error *error);
