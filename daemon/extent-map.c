/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "extent-map.h"
#include "util.h"

struct ExtentSlot {
        uint64_t bytenr;         /* 0: empty (no data extent lives at 0) */
        uint64_t bytes;
        uint64_t id_sum;         /* sum of the referring subvolumes' ids */
        uint64_t family_sum, family_squares;  /* of their family indexes: see ExtentFamily */
        uint32_t users;
        /* Scratch for extent queries, 0 between them; it fills the
         * padding, so it costs no memory. */
        uint32_t mark;
};
_Static_assert(sizeof(struct ExtentSlot) == 48, "the scratch counter must not grow the table");

struct ExtentFamilyKey {
        uint64_t source;
        uint32_t index;
};

/* The family all referrers of @s are in, or 0. */
static uint32_t slot_family(const struct ExtentSlot *s) {
        uint64_t f;

        if (s->users == 0 || s->family_sum % s->users != 0)
                return 0;
        f = s->family_sum / s->users;
        return f != 0 && s->family_squares == f * f * s->users ? (uint32_t) f : 0;
}

/* The slot's family went from @before to @after: its bytes move. */
static void family_move(ExtentMap *m, const struct ExtentSlot *s, uint32_t before, uint32_t after) {
        if (before == after)
                return;
        if (before)
                m->families[before].exclusive -= s->bytes;
        if (after)
                m->families[after].exclusive += s->bytes;
}

static size_t slot_index(const ExtentMap *m, uint64_t bytenr) {
        /* Fibonacci hashing of the byte number; extents are 4 KiB aligned. */
        return (size_t) ((bytenr >> 12) * 0x9e3779b97f4a7c15ULL) & (m->n_slots - 1);
}

static struct ExtentSlot *slot_find(const ExtentMap *m, uint64_t bytenr) {
        if (m->n_slots == 0)
                return NULL;
        for (size_t i = slot_index(m, bytenr);; i = (i + 1) & (m->n_slots - 1)) {
                if (m->slots[i].bytenr == bytenr)
                        return &m->slots[i];
                if (m->slots[i].bytenr == 0)
                        return NULL;
        }
}

static int slots_grow(ExtentMap *m) {
        size_t n = m->n_slots ? m->n_slots * 2 : 1024;
        struct ExtentSlot *old = m->slots, *slots = calloc(n, sizeof(*slots));
        size_t old_n = m->n_slots;

        if (!slots)
                return -ENOMEM;
        m->slots = slots;
        m->n_slots = n;
        for (size_t i = 0; i < old_n; i++) {
                if (old[i].bytenr == 0)
                        continue;
                size_t j = slot_index(m, old[i].bytenr);
                while (slots[j].bytenr != 0)
                        j = (j + 1) & (n - 1);
                slots[j] = old[i];
        }
        free(old);
        return 0;
}

/* Removes a slot, keeping the probe chains intact (backward shift). */
static void slot_delete(ExtentMap *m, struct ExtentSlot *s) {
        size_t i = (size_t) (s - m->slots), j = i;

        for (;;) {
                j = (j + 1) & (m->n_slots - 1);
                if (m->slots[j].bytenr == 0)
                        break;
                size_t home = slot_index(m, m->slots[j].bytenr);
                /* Move j back to i unless its home lies cyclically in (i, j]. */
                if ((i < j) ? (home <= i || home > j) : (home <= i && home > j)) {
                        m->slots[i] = m->slots[j];
                        i = j;
                }
        }
        m->slots[i] = (struct ExtentSlot) {};
        m->n_used--;
}

/* Takes the counts of the query running on @m back, if any: it starts
 * over at its next step. */
static void query_evict(ExtentMap *m) {
        ExtentQuery *q = m->query;

        if (!q)
                return;
        for (size_t i = q->summed; i < q->n_seen; i++)
                q->seen[i]->mark = 0;
        q->member = q->summed = q->n_seen = 0;
        q->walking = false;
        q->bytes = 0;
        q->restarts++;
        m->query = NULL;
}

/* ---- packed extent lists ---- */

static size_t varint_put(uint8_t *p, uint64_t v) {
        size_t n = 0;

        do {
                p[n++] = (uint8_t) ((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
                v >>= 7;
        } while (v);
        return n;
}

static bool varint_get(ExtentIter *it, uint64_t *ret) {
        uint64_t v = 0;

        for (unsigned shift = 0; it->p < it->end && shift < 64; shift += 7) {
                uint8_t b = *it->p++;
                if (shift == 63 && b > 1)
                        return false;  /* more than 64 bits */
                v |= (uint64_t) (b & 0x7f) << shift;
                if (!(b & 0x80)) {
                        *ret = v;
                        return true;
                }
        }
        return false;
}

/* A signed difference as an unsigned varint value: small either way. */
static uint64_t zigzag(uint64_t d) {
        return (d << 1) ^ (uint64_t) -(int64_t) (d >> 63);
}

static uint64_t unzigzag(uint64_t v) {
        return (v >> 1) ^ (uint64_t) -(int64_t) (v & 1);
}

bool extent_iter_next(ExtentIter *it, DataExtent *ret) {
        uint64_t delta, bytes, ram;

        if (it->p >= it->end || !varint_get(it, &delta) || !varint_get(it, &bytes) || !varint_get(it, &ram))
                return false;
        /* Strictly ascending and never 0: a delta of 0 or an overflow is
         * bad data. */
        if (delta == 0 || it->bytenr + delta < it->bytenr)
                return false;
        it->bytenr += delta;
        *ret = (DataExtent) { .bytenr = it->bytenr, .bytes = bytes, .ram_bytes = bytes + unzigzag(ram) };
        return true;
}

static size_t varint_size(uint64_t v) {
        size_t n = 1;

        while (v >= 0x80) {
                v >>= 7;
                n++;
        }
        return n;
}

static size_t packed_size(const DataExtent *extents, size_t n) {
        size_t size = 0;

        for (size_t i = 0; i < n; i++)
                size += varint_size(extents[i].bytenr - (i ? extents[i - 1].bytenr : 0)) +
                        varint_size(extents[i].bytes) + varint_size(zigzag(extents[i].ram_bytes - extents[i].bytes));
        return size;
}

/* Packs sorted, distinct @extents, into exactly the room they take. */
static int pack(const DataExtent *extents, size_t n, uint8_t **ret, size_t *ret_size) {
        size_t size = packed_size(extents, n);
        uint8_t *p = malloc(size ?: 1);
        uint64_t prev = 0;
        size_t at = 0;

        if (!p)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                at += varint_put(p + at, extents[i].bytenr - prev);
                at += varint_put(p + at, extents[i].bytes);
                at += varint_put(p + at, zigzag(extents[i].ram_bytes - extents[i].bytes));
                prev = extents[i].bytenr;
        }
        *ret = p;
        *ret_size = size;
        return 0;
}

/* Whether @packed holds exactly @n valid extents. */
static bool packed_valid(const uint8_t *packed, size_t size, size_t n) {
        ExtentIter it = { .p = packed, .end = packed + size };
        DataExtent e;
        size_t count = 0;

        while (it.p < it.end) {
                if (!extent_iter_next(&it, &e))
                        return false;
                count++;
        }
        return count == n;
}

/* ---- the map ---- */

/* Where user @id is, or would be inserted: users are sorted by id. */
static size_t user_index(const ExtentMap *m, uint64_t id) {
        return sorted_lower_bound(m->users, m->n_users, sizeof(ExtentUser), offsetof(ExtentUser, id), id);
}

const ExtentUser *extent_map_find_user(const ExtentMap *m, uint64_t id) {
        size_t i = user_index(m, id);

        return i < m->n_users && m->users[i].id == id ? &m->users[i] : NULL;
}

static ExtentUser *find_user(ExtentMap *m, uint64_t id) {
        return (ExtentUser *) extent_map_find_user(m, id);
}

/* One more subvolume refers to extent @e. */
static int ref_add(ExtentMap *m, ExtentUser *u, const DataExtent *e) {
        struct ExtentSlot *s = slot_find(m, e->bytenr);
        int r;

        u->referenced += e->bytes;
        u->logical_referenced += e->ram_bytes;
        if (!s) {
                if ((m->n_used + 1) * 4 > m->n_slots * 3) {  /* keep the load under 3/4 */
                        r = slots_grow(m);
                        if (r < 0)
                                return r;
                }
                size_t i = slot_index(m, e->bytenr);
                while (m->slots[i].bytenr != 0)
                        i = (i + 1) & (m->n_slots - 1);
                s = &m->slots[i];
                *s = (struct ExtentSlot) { .bytenr = e->bytenr, .bytes = e->bytes, .id_sum = u->id, .users = 1,
                                           .family_sum = u->family,
                                           .family_squares = (uint64_t) u->family * u->family };
                m->n_used++;
                u->exclusive += e->bytes;
                family_move(m, s, 0, slot_family(s));
                return 0;
        }
        if (s->users == 1) {
                ExtentUser *owner = find_user(m, s->id_sum);  /* shared from now on */
                if (owner)
                        owner->exclusive -= s->bytes;
        }
        uint32_t before = slot_family(s);
        s->users++;
        s->id_sum += u->id;
        s->family_sum += u->family;
        s->family_squares += (uint64_t) u->family * u->family;
        family_move(m, s, before, slot_family(s));
        return 0;
}

/* One subvolume fewer refers to extent @e. */
static void ref_remove(ExtentMap *m, ExtentUser *u, const DataExtent *e) {
        struct ExtentSlot *s = slot_find(m, e->bytenr);

        u->referenced -= e->bytes;
        u->logical_referenced -= e->ram_bytes;
        if (!s)
                return;
        uint32_t before = slot_family(s);
        s->users--;
        s->id_sum -= u->id;
        s->family_sum -= u->family;
        s->family_squares -= (uint64_t) u->family * u->family;
        family_move(m, s, before, slot_family(s));
        if (s->users == 0) {
                u->exclusive -= s->bytes;
                slot_delete(m, s);
        } else if (s->users == 1) {
                ExtentUser *owner = find_user(m, s->id_sum);  /* its own now */
                if (owner)
                        owner->exclusive += s->bytes;
        }
}

static ExtentUser *user_get(ExtentMap *m, uint64_t id) {
        size_t i = user_index(m, id);

        if (i < m->n_users && m->users[i].id == id)
                return &m->users[i];
        if (m->n_users + 1 >= EXTENT_USERS_MAX)
                return NULL;  /* the family sums would not be exact */
        if (grow_array(&m->users, &m->allocated_users, m->n_users + 1, sizeof(ExtentUser)) < 0)
                return NULL;
        /* Inserted in place; ids mostly come in ascending order, so this
         * rarely moves anything. */
        memmove(m->users + i + 1, m->users + i, (m->n_users - i) * sizeof(ExtentUser));
        m->n_users++;
        m->users[i] = (ExtentUser) { .id = id, .written = UINT64_MAX, .snapshots_exclusive = UINT64_MAX };
        return &m->users[i];
}

/* Takes back every reference of @u. */
static void user_clear(ExtentMap *m, ExtentUser *u) {
        ExtentIter it = extent_iter(u);
        DataExtent e;

        while (extent_iter_next(&it, &e))
                ref_remove(m, u, &e);
        free(u->packed);
        m->packed_bytes -= u->packed_size;
        u->packed = NULL;
        u->packed_size = u->n_extents = 0;
        u->referenced = u->exclusive = u->logical_referenced = 0;
}

/* extent_map_set_user_packed() with @packed known to be valid. */
static int set_user(ExtentMap *m, uint64_t id, uint64_t generation, uint64_t change_generation, uint64_t inodes,
                    uint64_t scanned_usec, uint8_t *packed, size_t packed_size, size_t n_extents) {
        ExtentUser *u;
        ExtentIter it = { .p = packed, .end = packed + packed_size };
        DataExtent e;
        int r;

        query_evict(m);  /* before anything moves */
        u = user_get(m, id);
        if (!u) {
                free(packed);
                return -ENOMEM;
        }
        user_clear(m, u);
        /* user_get() may not move u from here on: no insertion. */
        while (extent_iter_next(&it, &e)) {
                r = ref_add(m, u, &e);
                if (r < 0) {
                        /* Undo what came before @e, so that the map stays
                         * exact, and forget @id: it is read again. */
                        ExtentIter undo = { .p = packed, .end = packed + packed_size };
                        DataExtent f;
                        while (extent_iter_next(&undo, &f) && f.bytenr < e.bytenr)
                                ref_remove(m, u, &f);
                        free(packed);
                        extent_map_remove_user(m, id);
                        return r;
                }
        }
        u->packed = packed;
        u->packed_size = packed_size;
        u->n_extents = n_extents;
        u->list_version = ++m->list_versions;
        m->packed_bytes += packed_size;
        u->generation = generation;
        u->change_generation = change_generation;
        u->inodes = inodes;
        u->scanned_usec = scanned_usec;
        return 0;
}

int extent_map_set_user(ExtentMap *m, uint64_t id, uint64_t generation, uint64_t change_generation,
                        uint64_t inodes, uint64_t scanned_usec, DataExtent *extents, size_t n_extents) {
        uint8_t *packed;
        size_t size;
        int r;

        r = pack(extents, n_extents, &packed, &size);
        free(extents);
        if (r < 0)
                return r;
        /* Packed here: no need to check it. */
        return set_user(m, id, generation, change_generation, inodes, scanned_usec, packed, size, n_extents);
}

int extent_map_set_user_packed(ExtentMap *m, uint64_t id, uint64_t generation, uint64_t change_generation,
                               uint64_t inodes, uint64_t scanned_usec, uint8_t *packed, size_t packed_size,
                               size_t n_extents) {
        if (!packed_valid(packed, packed_size, n_extents)) {
                free(packed);
                return -EBADMSG;
        }
        return set_user(m, id, generation, change_generation, inodes, scanned_usec, packed, packed_size, n_extents);
}

/* ---- families ---- */

static size_t family_key_index(const ExtentMap *m, uint64_t source) {
        return sorted_lower_bound(m->family_keys, m->n_family_keys, sizeof(struct ExtentFamilyKey),
                                  offsetof(struct ExtentFamilyKey, source), source);
}

static uint32_t family_find(const ExtentMap *m, uint64_t source) {
        size_t i = family_key_index(m, source);

        return i < m->n_family_keys && m->family_keys[i].source == source ? m->family_keys[i].index : 0;
}

/* The index of @source's family, made if it has none: 0 on error. */
static uint32_t family_get(ExtentMap *m, uint64_t source, int *error) {
        size_t i = family_key_index(m, source);
        uint32_t index;

        if (i < m->n_family_keys && m->family_keys[i].source == source)
                return m->family_keys[i].index;
        if (grow_array(&m->family_keys, &m->allocated_family_keys, m->n_family_keys + 1,
                       sizeof(struct ExtentFamilyKey)) < 0) {
                *error = -ENOMEM;
                return 0;
        }
        if (m->n_free_families > 0)
                index = m->free_families[--m->n_free_families];
        else {
                if (m->n_families == 0)
                        m->n_families = 1;  /* index 0 is no family */
                if (m->n_families >= EXTENT_FAMILIES_MAX) {
                        *error = -E2BIG;
                        return 0;
                }
                if (grow_array(&m->families, &m->allocated_families, m->n_families + 1, sizeof(ExtentFamily)) < 0) {
                        *error = -ENOMEM;
                        return 0;
                }
                index = (uint32_t) m->n_families++;
        }
        m->families[index] = (ExtentFamily) { .source = source };
        memmove(m->family_keys + i + 1, m->family_keys + i, (m->n_family_keys - i) * sizeof(struct ExtentFamilyKey));
        m->family_keys[i] = (struct ExtentFamilyKey) { source, index };
        m->n_family_keys++;
        return index;
}

/* One member fewer in family @index; the last one lets the index go. */
static void family_leave(ExtentMap *m, uint32_t index) {
        size_t i;

        if (index == 0 || --m->families[index].members > 0)
                return;
        /* No member, so no extent of its own left: exclusive is 0. */
        i = family_key_index(m, m->families[index].source);
        memmove(m->family_keys + i, m->family_keys + i + 1, (m->n_family_keys - i - 1) * sizeof(struct ExtentFamilyKey));
        m->n_family_keys--;
        m->families[index] = (ExtentFamily) {};
        /* Room for it was there: at most as many free as families made. */
        if (grow_array(&m->free_families, &m->allocated_free_families, m->n_free_families + 1, sizeof(uint32_t)) >= 0)
                m->free_families[m->n_free_families++] = index;
}

/* Moves every reference of @u from its family to family @to. */
static void user_refamily(ExtentMap *m, ExtentUser *u, uint32_t to) {
        uint64_t from = u->family;
        ExtentIter it = extent_iter(u);
        DataExtent e;

        while (extent_iter_next(&it, &e)) {
                struct ExtentSlot *s = slot_find(m, e.bytenr);
                uint32_t before;

                if (!s)
                        continue;
                before = slot_family(s);
                s->family_sum += (uint64_t) to - from;
                s->family_squares += (uint64_t) to * to - from * from;
                family_move(m, s, before, slot_family(s));
        }
        u->family = to;
}

int extent_map_set_family(ExtentMap *m, uint64_t id, uint64_t source) {
        ExtentUser *u = find_user(m, id);
        uint32_t index = 0;
        int r = 0;

        if (!u || extent_user_family_source(m, u) == source)
                return 0;
        if (source != 0) {
                index = family_get(m, source, &r);  /* on failure 0: in none, rather than in a wrong one */
                if (index != 0)
                        m->families[index].members++;
        }
        uint32_t old = u->family;
        user_refamily(m, u, index);
        family_leave(m, old);
        return r < 0 ? r : 1;
}

ExtentFamily *extent_map_family(const ExtentMap *m, uint64_t source) {
        uint32_t index = family_find(m, source);

        return index ? &m->families[index] : NULL;
}

uint64_t extent_map_family_exclusive(const ExtentMap *m, uint64_t source) {
        const ExtentFamily *f = extent_map_family(m, source);

        return f ? f->exclusive : 0;
}

void extent_map_remove_user(ExtentMap *m, uint64_t id) {
        ExtentUser *u = find_user(m, id);

        if (!u)
                return;
        query_evict(m);
        user_clear(m, u);
        family_leave(m, u->family);
        memmove(u, u + 1, (size_t) (m->users + m->n_users - (u + 1)) * sizeof(ExtentUser));
        m->n_users--;
}

size_t extent_map_growth(const ExtentMap *m, uint64_t id, const DataExtent *extents, size_t n) {
        size_t used = m->n_used, slots = m->n_slots, growth = packed_size(extents, n);

        for (size_t i = 0; i < n; i++)
                if (!slot_find(m, extents[i].bytenr))
                        used++;
        /* As ref_add() grows the table: doubling, from 1024 slots. */
        while (used * 4 > slots * 3)
                slots = slots ? slots * 2 : 1024;
        if (slots > m->n_slots)
                /* The last doubling copies from a table half the size. */
                growth += (slots + (slots > 1024 ? slots / 2 : 0) - m->n_slots) * sizeof(struct ExtentSlot);
        if (!extent_map_find_user(m, id) && m->n_users == m->allocated_users)
                /* grow_array()'s next size, with the old array while it is copied */
                growth += (m->n_users + 1 < 16 ? 16 : (m->n_users + 1) * 2) * sizeof(ExtentUser);
        return growth;
}

size_t extent_map_memory(const ExtentMap *m) {
        return m->n_slots * sizeof(struct ExtentSlot) + m->allocated_users * sizeof(ExtentUser) + m->packed_bytes +
               m->allocated_families * sizeof(ExtentFamily) +
               m->allocated_family_keys * sizeof(struct ExtentFamilyKey) +
               m->allocated_free_families * sizeof(uint32_t);
}

/* ---- space of sets ---- */

uint64_t extent_map_written_since(const ExtentUser *u, const ExtentUser *since) {
        ExtentIter a = extent_iter(u), b = extent_iter(since);
        DataExtent x, y;
        bool more_b = extent_iter_next(&b, &y);
        uint64_t bytes = 0;

        /* Both lists ascend: one merge walk. */
        while (extent_iter_next(&a, &x)) {
                while (more_b && y.bytenr < x.bytenr)
                        more_b = extent_iter_next(&b, &y);
                if (!more_b || y.bytenr != x.bytenr)
                        bytes += x.bytes;
        }
        return bytes;
}

/* Counts the members referring to each extent in its slot's scratch
 * counter, noting each slot at its first count: one table lookup per
 * reference, a batch of them fetched at once (each is a cache miss in a
 * large table).  At most @budget extents; returns how many, or -ENOMEM. */
static ssize_t query_count(ExtentMap *m, ExtentQuery *q, size_t budget) {
        DataExtent batch[16];
        size_t k, done = 0;

        while (done < budget && q->walking) {
                for (k = 0; k < ELEMENTSOF(batch) && done + k < budget && extent_iter_next(&q->it, &batch[k]); k++)
                        __builtin_prefetch(&m->slots[slot_index(m, batch[k].bytenr)]);
                if (k < ELEMENTSOF(batch) && done + k < budget)
                        q->walking = false;  /* the end of this member's list */
                for (size_t j = 0; j < k; j++) {
                        struct ExtentSlot *s = slot_find(m, batch[j].bytenr);
                        if (!s)
                                continue;
                        if (s->mark == 0) {
                                if (grow_array(&q->seen, &q->allocated_seen, q->n_seen + 1, sizeof(struct ExtentSlot *)) < 0)
                                        return -ENOMEM;  /* the counts so far are taken back by extent_query_done() */
                                q->seen[q->n_seen++] = s;
                        }
                        s->mark++;
                }
                done += k;
        }
        return (ssize_t) done;
}

int extent_query_step(ExtentMap *m, ExtentQuery *q, size_t budget, uint64_t *ret) {
        if (m->query != q) {
                /* Not begun, or its counts were taken back: from the start. */
                query_evict(m);
                q->member = q->summed = q->n_seen = 0;
                q->walking = false;
                q->bytes = 0;
                m->query = q;
        }
        while (budget > 0) {
                if (q->member < q->n) {
                        if (!q->walking) {
                                const ExtentUser *u = extent_map_find_user(m, q->ids[q->member]);
                                if (!u)
                                        return -ENOENT;
                                q->it = extent_iter(u);
                                q->walking = true;
                        }
                        ssize_t done = query_count(m, q, budget);
                        if (done < 0)
                                return (int) done;
                        budget -= (size_t) done;
                        if (!q->walking)
                                q->member++;
                        continue;
                }
                /* Then each distinct extent once: it counts when no
                 * referrer is outside the set.  The counters go back to 0. */
                for (; budget > 0 && q->summed < q->n_seen; budget--, q->summed++) {
                        struct ExtentSlot *s = q->seen[q->summed];
                        if (s->mark == s->users)
                                q->bytes += s->bytes;
                        s->mark = 0;
                }
                if (q->summed == q->n_seen) {
                        m->query = NULL;
                        *ret = q->bytes;
                        return 1;
                }
        }
        return 0;
}

void extent_query_done(ExtentMap *m, ExtentQuery *q) {
        if (m && m->query == q)
                query_evict(m);
        free(q->seen);
        q->seen = NULL;
        q->n_seen = q->allocated_seen = 0;
        q->member = q->summed = 0;
        q->walking = false;
        q->bytes = 0;
}

int extent_map_exclusive_of(ExtentMap *m, const ExtentUser *const *set, size_t n, uint64_t *ret) {
        _cleanup_free_ uint64_t *ids = calloc(n ?: 1, sizeof(uint64_t));
        ExtentQuery q = { .ids = ids, .n = n };
        int r;

        if (!ids)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                ids[i] = set[i]->id;
        r = extent_query_step(m, &q, SIZE_MAX, ret);
        extent_query_done(m, &q);
        return r < 0 ? r : 0;
}

void extent_map_done(ExtentMap *m) {
        query_evict(m);
        for (size_t i = 0; i < m->n_users; i++)
                free(m->users[i].packed);
        free(m->users);
        free(m->slots);
        free(m->families);
        free(m->family_keys);
        free(m->free_families);
        *m = (ExtentMap) {};
}
