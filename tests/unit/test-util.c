/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <glib.h>

#include "util.h"

static void test_uuid(void) {
        const uint8_t u[16] = { 0x8a, 0xb4, 0x8a, 0xe8, 0xe8, 0x0e, 0x47, 0x0e,
                                0xb8, 0x58, 0xe6, 0x99, 0xf7, 0x92, 0x0a, 0xb8 };
        const uint8_t zero[16] = {};
        char s[UUID_STRING_MAX], h[UUID_HEX_MAX];
        uint8_t back[16];

        g_assert_cmpstr(uuid_format(u, s), ==, "8ab48ae8-e80e-470e-b858-e699f7920ab8");
        g_assert_cmpstr(uuid_format(zero, s), ==, "");
        g_assert_cmpstr(uuid_format_hex(u, h), ==, "8ab48ae8e80e470eb858e699f7920ab8");
        g_assert_cmpint(uuid_parse_hex(h, strlen(h), back), ==, 0);
        g_assert_cmpmem(back, 16, u, 16);
        g_assert_cmpint(uuid_parse_hex(h, 31, back), ==, -EINVAL);
        g_assert_cmpint(uuid_parse_hex("8AB48AE8E80E470EB858E699F7920AB8", 32, back), ==, -EINVAL);
        g_assert_cmpint(uuid_parse_hex("8ab48ae8e80e470eb858e699f7920axx", 32, back), ==, -EINVAL);
}

static void test_strv(void) {
        char **l = NULL;
        size_t n = 0;

        g_assert_cmpint(strv_extend(&l, &n, "b"), ==, 0);
        g_assert_cmpint(strv_extend(&l, &n, "a"), ==, 0);
        g_assert_cmpint(strv_extend(&l, &n, "b"), ==, 0);
        g_assert_cmpint(strv_length(l), ==, 3);
        strv_sort(l);
        strv_uniq(l);
        g_assert_cmpint(strv_length(l), ==, 2);
        g_assert_cmpstr(l[0], ==, "a");
        g_assert_cmpstr(l[1], ==, "b");
        g_assert_null(l[2]);
        g_assert_null(strv_free(l));
        g_assert_cmpint(strv_length(NULL), ==, 0);
}

static void test_path_join(void) {
        char *s;

        s = path_join("/mnt/", "/a/b");
        g_assert_cmpstr(s, ==, "/mnt/a/b");
        free(s);
        s = path_join("/", "a");
        g_assert_cmpstr(s, ==, "/a");
        free(s);
}

static void test_parse_size(void) {
        uint64_t v;

        g_assert_cmpint(parse_size("0", &v), ==, 0);
        g_assert_cmpuint(v, ==, 0);
        g_assert_cmpint(parse_size("4096", &v), ==, 0);
        g_assert_cmpuint(v, ==, 4096);
        g_assert_cmpint(parse_size("64K", &v), ==, 0);
        g_assert_cmpuint(v, ==, 64 << 10);
        g_assert_cmpint(parse_size("256M", &v), ==, 0);
        g_assert_cmpuint(v, ==, 256ULL << 20);
        g_assert_cmpint(parse_size("3G", &v), ==, 0);
        g_assert_cmpuint(v, ==, 3ULL << 30);
        g_assert_cmpint(parse_size("17179869184G", &v), ==, -ERANGE);
        g_assert_cmpint(parse_size("M", &v), ==, -EINVAL);
        g_assert_cmpint(parse_size("", &v), ==, -EINVAL);
        g_assert_cmpint(parse_size("1MB", &v), ==, -EINVAL);
        g_assert_cmpint(parse_size("1m", &v), ==, -EINVAL);
        g_assert_cmpint(parse_size("-1K", &v), ==, -EINVAL);
        g_assert_cmpint(parse_size(NULL, &v), ==, -EINVAL);
}

static void test_parse_u64(void) {
        uint64_t v = 7;

        g_assert_cmpint(parse_u64("0", &v), ==, 0);
        g_assert_cmpuint(v, ==, 0);
        g_assert_cmpint(parse_u64("18446744073709551615", &v), ==, 0);
        g_assert_cmpuint(v, ==, UINT64_MAX);
        g_assert_cmpint(parse_u64("18446744073709551616", &v), ==, -ERANGE);
        g_assert_cmpuint(v, ==, UINT64_MAX);
        g_assert_cmpint(parse_u64("", &v), ==, -EINVAL);
        g_assert_cmpint(parse_u64("-1", &v), ==, -EINVAL);
        g_assert_cmpint(parse_u64("+1", &v), ==, -EINVAL);
        g_assert_cmpint(parse_u64(" 1", &v), ==, -EINVAL);
        g_assert_cmpint(parse_u64("12x", &v), ==, -EINVAL);
        g_assert_cmpint(parse_u64(NULL, &v), ==, -EINVAL);
}

int main(int argc, char *argv[]) {
        g_test_init(&argc, &argv, NULL);
        g_test_add_func("/util/uuid", test_uuid);
        g_test_add_func("/util/strv", test_strv);
        g_test_add_func("/util/path-join", test_path_join);
        g_test_add_func("/util/parse-u64", test_parse_u64);
        g_test_add_func("/util/parse-size", test_parse_size);
        return g_test_run();
}
