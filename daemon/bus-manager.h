/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The org.subvold.Subvold1.Manager interface on /org/subvold/Subvold1. */

#include "manager.h"

int bus_manager_register(sd_bus *bus, Manager *m);
