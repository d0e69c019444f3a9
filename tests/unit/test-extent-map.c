/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Exclusive bytes as subvolumes come, change and go. */
#include <glib.h>

#include "extent-map.h"
#include "util.h"

static DataExtent *extents(size_t n, ...) {
        DataExtent *e = calloc(n ?: 1, sizeof(DataExtent));
        va_list ap;

        va_start(ap, n);
        for (size_t i = 0; i < n; i++) {
                e[i].bytenr = va_arg(ap, uint64_t);
                e[i].bytes = va_arg(ap, uint64_t);
                e[i].ram_bytes = e[i].bytes;  /* uncompressed */
        }
        va_end(ap);
        return e;
}

static void assert_user(const ExtentMap *m, uint64_t id, uint64_t referenced, uint64_t exclusive) {
        const ExtentUser *u = extent_map_find_user(m, id);

        g_assert_nonnull(u);
        g_assert_cmpuint(u->referenced, ==, referenced);
        g_assert_cmpuint(u->exclusive, ==, exclusive);
}

#define K 4096ULL

static void test_sharing(void) {
        ExtentMap m = {};

        /* A has extents at 1 MiB (256 K) and 2 MiB (4 K). */
        g_assert_cmpint(extent_map_set_user(&m, 256, 1, 1, 2, 0, extents(2, 1ULL << 20, 64 * K, 2ULL << 20, K), 2), ==, 0);
        assert_user(&m, 256, 65 * K, 65 * K);
        /* A snapshot S shares both. */
        g_assert_cmpint(extent_map_set_user(&m, 257, 1, 1, 2, 0, extents(2, 1ULL << 20, 64 * K, 2ULL << 20, K), 2), ==, 0);
        assert_user(&m, 256, 65 * K, 0);
        assert_user(&m, 257, 65 * K, 0);
        g_assert_cmpuint(extent_map_size(&m), ==, 2);
        /* S rewrites the small file: a new extent of its own. */
        g_assert_cmpint(extent_map_set_user(&m, 257, 2, 2, 2, 0, extents(2, 1ULL << 20, 64 * K, 3ULL << 20, K), 2), ==, 0);
        assert_user(&m, 256, 65 * K, K);
        assert_user(&m, 257, 65 * K, K);
        /* A third one shares the big extent: nothing changes for exclusive. */
        g_assert_cmpint(extent_map_set_user(&m, 258, 1, 1, 1, 0, extents(1, 1ULL << 20, 64 * K), 1), ==, 0);
        assert_user(&m, 258, 64 * K, 0);
        /* S is deleted: A owns its extents again... but 258 still shares. */
        extent_map_remove_user(&m, 257);
        g_assert_null(extent_map_find_user(&m, 257));
        assert_user(&m, 256, 65 * K, K);
        extent_map_remove_user(&m, 258);
        assert_user(&m, 256, 65 * K, 65 * K);
        g_assert_cmpuint(extent_map_size(&m), ==, 2);
        extent_map_remove_user(&m, 256);
        g_assert_cmpuint(extent_map_size(&m), ==, 0);
        extent_map_done(&m);
}

static uint64_t exclusive_of(ExtentMap *m, const ExtentUser *const *set, size_t n) {
        uint64_t bytes = UINT64_MAX;

        g_assert_cmpint(extent_map_exclusive_of(m, set, n, &bytes), ==, 0);
        return bytes;
}

/* Written-since and exclusive-of-a-set, against what each extent's
 * referrers say by construction. */
static void test_sets(void) {
        ExtentMap m = {};
        const ExtentUser *set[3];

        /* 256 refers to a, b, c; 257 (its snapshot) to a, b, d; 258 to b
         * (a reflink) and e.  a = 1 K, b = 2 K, c = 4 K, d = 8 K, e = 16 K. */
        g_assert_cmpint(extent_map_set_user(&m, 256, 1, 1, 1, 0, extents(3, 1 * K, 1 * K, 2 * K, 2 * K, 3 * K, 4 * K), 3), ==, 0);
        g_assert_cmpint(extent_map_set_user(&m, 257, 1, 1, 1, 0, extents(3, 1 * K, 1 * K, 2 * K, 2 * K, 4 * K, 8 * K), 3), ==, 0);
        g_assert_cmpint(extent_map_set_user(&m, 258, 1, 1, 1, 0, extents(2, 2 * K, 2 * K, 5 * K, 16 * K), 2), ==, 0);
        set[0] = extent_map_find_user(&m, 256);
        set[1] = extent_map_find_user(&m, 257);
        set[2] = extent_map_find_user(&m, 258);
        /* Uncompressed, ram_bytes is the size. */
        g_assert_cmpuint(set[0]->logical_referenced, ==, 7 * K);
        g_assert_cmpuint(extent_map_written_since(set[0], set[1]), ==, 4 * K);
        g_assert_cmpuint(extent_map_written_since(set[1], set[0]), ==, 8 * K);
        g_assert_cmpuint(extent_map_written_since(set[0], set[2]), ==, 5 * K);
        g_assert_cmpuint(extent_map_written_since(set[0], set[0]), ==, 0);
        g_assert_cmpuint(exclusive_of(&m, set, 0), ==, 0);
        g_assert_cmpuint(exclusive_of(&m, set, 1), ==, 4 * K);
        /* a is theirs; b is 258's too. */
        g_assert_cmpuint(exclusive_of(&m, set, 2), ==, 1 * K + 4 * K + 8 * K);
        g_assert_cmpuint(exclusive_of(&m, set + 1, 2), ==, 8 * K + 16 * K);
        g_assert_cmpuint(exclusive_of(&m, set, 3), ==, 31 * K);
        /* The counters were left at 0: the same answer again. */
        g_assert_cmpuint(exclusive_of(&m, set, 2), ==, 13 * K);
        /* Compressed: 1 K on disk holding 8 K, counted once however many
         * times it is referred to; it goes with the list it came in. */
        DataExtent *z = extents(2, 6 * K, 1 * K, 7 * K, 2 * K);
        z[0].ram_bytes = 8 * K;
        g_assert_cmpint(extent_map_set_user(&m, 256, 2, 2, 1, 0, z, 2), ==, 0);
        g_assert_cmpuint(extent_map_find_user(&m, 256)->referenced, ==, 3 * K);
        g_assert_cmpuint(extent_map_find_user(&m, 256)->logical_referenced, ==, 10 * K);
        g_assert_cmpint(extent_map_set_user(&m, 256, 3, 3, 1, 0, extents(1, 7 * K, 2 * K), 1), ==, 0);
        g_assert_cmpuint(extent_map_find_user(&m, 256)->logical_referenced, ==, 2 * K);
        extent_map_done(&m);
}

/* extent_map_growth() covers what the map takes on, table doubling
 * included, and is exact when nothing is left to guess. */
static void test_growth(void) {
        ExtentMap m = {};
        DataExtent *e = calloc(800, sizeof(DataExtent));
        size_t before, growth;

        for (size_t i = 0; i < 800; i++)
                e[i] = (DataExtent) { .bytenr = (i + 1) * 2 * K, .bytes = K };
        /* 800 new extents: past 3/4 of 1024 slots, so 2048, copied from
         * 1024; the first 16 users; the packed list. */
        growth = extent_map_growth(&m, 256, e, 800);
        g_assert_cmpint(extent_map_set_user(&m, 256, 1, 1, 1, 0, e, 800), ==, 0);
        before = extent_map_memory(&m);
        g_assert_cmpuint(m.n_slots, ==, 2048);
        g_assert_cmpuint(growth, ==, before + 1024 * 48);  /* 48 bytes a slot */
        /* A snapshot: no new slot, no new user room; its list alone. */
        e = calloc(800, sizeof(DataExtent));
        for (size_t i = 0; i < 800; i++)
                e[i] = (DataExtent) { .bytenr = (i + 1) * 2 * K, .bytes = K };
        growth = extent_map_growth(&m, 257, e, 800);
        g_assert_cmpint(extent_map_set_user(&m, 257, 1, 1, 1, 0, e, 800), ==, 0);
        g_assert_cmpuint(extent_map_memory(&m), ==, before + growth);
        extent_map_done(&m);
}

static void test_many(void) {
        enum { N = 20000 };
        ExtentMap m = {};
        DataExtent *a = calloc(N, sizeof(DataExtent)), *b = calloc(N / 2, sizeof(DataExtent));

        /* Enough to grow and rehash the table several times, and to delete
         * with long probe chains. */
        for (size_t i = 0; i < N; i++)
                a[i] = (DataExtent) { .bytenr = (i + 1) * K, .bytes = K };
        for (size_t i = 0; i < N / 2; i++)
                b[i] = (DataExtent) { .bytenr = (2 * i + 1) * K, .bytes = K };
        g_assert_cmpint(extent_map_set_user(&m, 5, 1, 1, 1, 0, a, N), ==, 0);
        g_assert_cmpint(extent_map_set_user(&m, 300, 1, 1, 1, 0, b, N / 2), ==, 0);
        assert_user(&m, 5, N * K, N / 2 * K);
        assert_user(&m, 300, N / 2 * K, 0);
        extent_map_remove_user(&m, 5);
        assert_user(&m, 300, N / 2 * K, N / 2 * K);
        g_assert_cmpuint(extent_map_size(&m), ==, N / 2);
        extent_map_done(&m);
}

static void test_user_order(void) {
        static const uint64_t ids[] = { 300, 5, 1000, 256, 257, 7, 999 };
        ExtentMap m = {};

        /* Users arrive in any order; lookups need them sorted. */
        for (size_t i = 0; i < G_N_ELEMENTS(ids); i++)
                g_assert_cmpint(extent_map_set_user(&m, ids[i], 1, 1, 1, 0, extents(1, (i + 1) * K, K), 1), ==, 0);
        g_assert_cmpuint(m.n_users, ==, G_N_ELEMENTS(ids));
        for (size_t i = 1; i < m.n_users; i++)
                g_assert_cmpuint(m.users[i - 1].id, <, m.users[i].id);
        for (size_t i = 0; i < G_N_ELEMENTS(ids); i++)
                assert_user(&m, ids[i], K, K);
        g_assert_null(extent_map_find_user(&m, 6));
        extent_map_done(&m);
}

static void test_packing(void) {
        /* Small and huge numbers: one- to ten-byte varints. */
        static const DataExtent in[] = {
                { 1, 1, 1 }, { 128, 127, 4096 }, { 4096, 4096, 0 }, { 1ULL << 40, 128ULL << 20, 128ULL << 20 },
                { UINT64_MAX - 1, UINT64_MAX, 1 },
        };
        ExtentMap m = {};
        DataExtent *copy = g_memdup2(in, sizeof in), e;
        ExtentIter it;
        size_t n = 0;

        g_assert_cmpint(extent_map_set_user(&m, 256, 1, 1, 0, 0, copy, G_N_ELEMENTS(in)), ==, 0);
        const ExtentUser *u = extent_map_find_user(&m, 256);
        g_assert_cmpuint(u->n_extents, ==, G_N_ELEMENTS(in));
        g_assert_cmpuint(u->packed_size, <, sizeof in);
        it = extent_iter(u);
        while (extent_iter_next(&it, &e)) {
                g_assert_cmpuint(e.bytenr, ==, in[n].bytenr);
                g_assert_cmpuint(e.bytes, ==, in[n].bytes);
                g_assert_cmpuint(e.ram_bytes, ==, in[n].ram_bytes);
                n++;
        }
        g_assert_cmpuint(n, ==, G_N_ELEMENTS(in));
        extent_map_done(&m);
}

static void test_packed_checked(void) {
        /* What the scan cache hands over is checked before use. */
        static const struct {
                const char *what;
                uint8_t data[12];
                size_t size, n;
        } bad[] = {
                { "fewer extents than said", { 0x01, 0x01, 0x00 }, 3, 2 },
                { "more extents than said", { 0x01, 0x01, 0x00, 0x01, 0x01, 0x00 }, 6, 1 },
                { "a zero distance (not ascending)", { 0x01, 0x01, 0x00, 0x00, 0x01, 0x00 }, 6, 2 },
                { "a truncated varint", { 0x01, 0x01, 0x81 }, 3, 1 },
                { "no ram_bytes", { 0x01, 0x01 }, 2, 1 },
                { "trailing bytes", { 0x01, 0x01, 0x00, 0x01 }, 4, 1 },
                { "a varint over 64 bits", { 0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0x00 }, 12, 1 },
                { "a varint of 11 bytes", { 0x01, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x81 }, 12, 1 },
        };
        ExtentMap m = {};

        for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
                g_test_message("%s", bad[i].what);
                g_assert_cmpint(extent_map_set_user_packed(&m, 256, 1, 1, 0, 0, g_memdup2(bad[i].data, bad[i].size),
                                                           bad[i].size, bad[i].n), ==, -EBADMSG);
                g_assert_null(extent_map_find_user(&m, 256));
        }
        g_assert_cmpuint(extent_map_size(&m), ==, 0);
        /* An overflow of the byte number: UINT64_MAX, then +2. */
        uint8_t overflow[] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x01, 0x00, 0x02, 0x01, 0x00 };
        g_assert_cmpint(extent_map_set_user_packed(&m, 256, 1, 1, 0, 0, g_memdup2(overflow, sizeof overflow),
                                                   sizeof overflow, 2), ==, -EBADMSG);
        extent_map_done(&m);
}

/* A query run in steps gives the answer the test computes from the lists
 * it made, whatever the step size, and the answer of the map as it is
 * at the end when the map changes between steps. */
#define Q_USERS 24
#define Q_EXTENTS 600

static bool q_refers[Q_USERS][Q_EXTENTS];

static uint64_t q_size(size_t e) {
        return (e % 7 + 1) * K;
}

static void q_set_user(ExtentMap *m, GRand *rand, size_t u) {
        DataExtent *list = calloc(Q_EXTENTS, sizeof(DataExtent));
        size_t n = 0;

        for (size_t e = 0; e < Q_EXTENTS; e++) {
                /* Neighbours share: a snapshot family of sorts. */
                q_refers[u][e] = g_rand_int_range(rand, 0, 4) == 0;
                if (q_refers[u][e])
                        list[n++] = (DataExtent) { .bytenr = (e + 1) * K, .bytes = q_size(e), .ram_bytes = q_size(e) };
        }
        g_assert_cmpint(extent_map_set_user(m, 256 + u, 1, 1, 1, 0, list, n), ==, 0);
}

static uint64_t q_truth(const bool in_set[Q_USERS]) {
        uint64_t bytes = 0;

        for (size_t e = 0; e < Q_EXTENTS; e++) {
                bool inside = false, outside = false;
                for (size_t u = 0; u < Q_USERS; u++)
                        if (q_refers[u][e])
                                *(in_set[u] ? &inside : &outside) = true;
                if (inside && !outside)
                        bytes += q_size(e);
        }
        return bytes;
}

static void test_query_in_steps(void) {
        static const size_t budgets[] = { 1, 7, 16, 17, 100, SIZE_MAX };
        GRand *rand = g_rand_new_with_seed(15);
        ExtentMap m = {};

        for (size_t u = 0; u < Q_USERS; u++)
                q_set_user(&m, rand, u);
        for (unsigned round = 0; round < 200; round++) {
                bool in_set[Q_USERS] = {};
                uint64_t ids[Q_USERS], bytes = UINT64_MAX;
                size_t n = 0, budget = budgets[round % G_N_ELEMENTS(budgets)];
                ExtentQuery q = { .ids = ids };
                int r;

                for (size_t u = 0; u < Q_USERS; u++)
                        if (g_rand_int_range(rand, 0, 3) == 0) {
                                in_set[u] = true;
                                ids[n++] = 256 + u;
                        }
                q.n = n;
                bool change = round % 3 == 0 && budget < 100;
                unsigned steps = 0;
                while ((r = extent_query_step(&m, &q, budget, &bytes)) == 0) {
                        /* Once, midway: a user read again. */
                        if (change && ++steps == 5) {
                                q_set_user(&m, rand, (size_t) g_rand_int_range(rand, 0, Q_USERS));
                                change = false;
                        }
                }
                g_assert_cmpint(r, ==, 1);
                g_assert_cmpuint(bytes, ==, q_truth(in_set));
                if (round % 3 == 0 && budget < 100 && steps >= 5)
                        g_assert_cmpuint(q.restarts, ==, 1);
                extent_query_done(&m, &q);
                g_assert_null(m.query);
        }
        /* Two queries in turn: each takes the counts from the other and
         * starts over; both answers stay right. */
        uint64_t a_ids[] = { 256, 257, 258 }, b_ids[] = { 259, 260 }, a = 0, b = 0;
        bool a_set[Q_USERS] = { true, true, true }, b_set[Q_USERS] = { [3] = true, [4] = true };
        ExtentQuery qa = { .ids = a_ids, .n = 3 }, qb = { .ids = b_ids, .n = 2 };
        g_assert_cmpint(extent_query_step(&m, &qa, 50, &a), ==, 0);
        g_assert_cmpint(extent_query_step(&m, &qb, 50, &b), ==, 0);
        g_assert_cmpint(extent_query_step(&m, &qa, SIZE_MAX, &a), ==, 1);
        g_assert_cmpint(extent_query_step(&m, &qb, SIZE_MAX, &b), ==, 1);
        g_assert_cmpuint(a, ==, q_truth(a_set));
        g_assert_cmpuint(b, ==, q_truth(b_set));
        g_assert_cmpuint(qa.restarts, ==, 1);
        g_assert_cmpuint(qb.restarts, ==, 1);
        extent_query_done(&m, &qa);
        extent_query_done(&m, &qb);
        /* A member that is not in the map; its counts go back. */
        uint64_t gone_ids[] = { 256, 999 };
        ExtentQuery gone = { .ids = gone_ids, .n = 2 };
        g_assert_cmpint(extent_query_step(&m, &gone, SIZE_MAX, &a), ==, -ENOENT);
        extent_query_done(&m, &gone);
        g_assert_cmpint(extent_query_step(&m, &qa, SIZE_MAX, &a), ==, 1);
        g_assert_cmpuint(a, ==, q_truth(a_set));
        extent_query_done(&m, &qa);
        /* The map freed under a query that is not over. */
        g_assert_cmpint(extent_query_step(&m, &qb, 10, &b), ==, 0);
        extent_map_done(&m);
        extent_query_done(NULL, &qb);
        g_rand_free(rand);
}

/* Each family's exclusive bytes, kept with every reference, against the
 * test's own count from the lists it made, through random churn: lists
 * set again, users moved between families, removed and back. */
static uint64_t q_source[Q_USERS];  /* 0: in no family */
static bool q_present[Q_USERS];

static uint64_t family_truth(uint64_t source) {
        uint64_t bytes = 0;

        for (size_t e = 0; e < Q_EXTENTS; e++) {
                bool inside = false, outside = false;
                for (size_t u = 0; u < Q_USERS; u++)
                        if (q_present[u] && q_refers[u][e])
                                *(q_source[u] == source ? &inside : &outside) = true;
                if (inside && !outside)
                        bytes += q_size(e);
        }
        return bytes;
}

static void test_families(void) {
        GRand *rand = g_rand_new_with_seed(16);
        ExtentMap m = {};

        for (size_t u = 0; u < Q_USERS; u++) {
                q_set_user(&m, rand, u);
                q_present[u] = true;
        }
        for (unsigned round = 0; round < 2000; round++) {
                size_t u = (size_t) g_rand_int_range(rand, 0, Q_USERS);

                switch (g_rand_int_range(rand, 0, 4)) {
                case 0:  /* read again */
                        if (q_present[u])
                                q_set_user(&m, rand, u);
                        break;
                case 1: {  /* a snapshot of one of the first four, or of none */
                        int pick = g_rand_int_range(rand, 0, 5);
                        uint64_t source = pick == 4 || (size_t) pick == u ? 0 : 256 + (uint64_t) pick;
                        g_assert_cmpint(extent_map_set_family(&m, 256 + u, source), >=, 0);
                        if (q_present[u])
                                q_source[u] = source;
                        break;
                }
                case 2:  /* deleted */
                        extent_map_remove_user(&m, 256 + u);
                        q_present[u] = false;
                        q_source[u] = 0;
                        break;
                default:  /* created */
                        if (!q_present[u]) {
                                q_set_user(&m, rand, u);
                                q_present[u] = true;
                        }
                }
                for (uint64_t source = 256; source < 260; source++)
                        g_assert_cmpuint(extent_map_family_exclusive(&m, source), ==, family_truth(source));
        }
        /* Everyone out of every family: nothing is left in one. */
        for (size_t u = 0; u < Q_USERS; u++)
                g_assert_cmpint(extent_map_set_family(&m, 256 + u, 0), >=, 0);
        g_assert_cmpuint(m.n_family_keys, ==, 0);
        extent_map_done(&m);
        g_rand_free(rand);
}

int main(int argc, char *argv[]) {
        g_test_init(&argc, &argv, NULL);
        g_test_add_func("/extent-map/sharing", test_sharing);
        g_test_add_func("/extent-map/many", test_many);
        g_test_add_func("/extent-map/sets", test_sets);
        g_test_add_func("/extent-map/growth", test_growth);
        g_test_add_func("/extent-map/user-order", test_user_order);
        g_test_add_func("/extent-map/packing", test_packing);
        g_test_add_func("/extent-map/packed-checked", test_packed_checked);
        g_test_add_func("/extent-map/query-in-steps", test_query_in_steps);
        g_test_add_func("/extent-map/families", test_families);
        return g_test_run();
}
