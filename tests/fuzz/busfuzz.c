/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * busfuzz - sends a running subvold, for a bounded time and from several
 * connections at once, calls to every method and property of its
 * introspection XML and to names that do not exist, with right, wrong and
 * random signatures, random and edge-case values and fds of every kind.
 *
 * usage: busfuzz XML SECONDS CONNECTIONS SEED BASE_PATH FILE_OR_DIR...
 *
 * The bus is the system bus ($DBUS_SYSTEM_BUS_ADDRESS).  BASE_PATH is
 * where paths for GetSubvolumeByPath start (a btrfs mount point); the
 * FILE_OR_DIRs are opened for the fd arguments, and may vanish at any
 * moment (a mount that comes and goes).  Objects are learned from
 * GetManagedObjects every half second; those gone since are called as
 * "just vanished".
 *
 * Each answer must be a method return or an error named org.subvold.* or
 * org.freedesktop.DBus.Error.*; NoReply, ServiceUnknown, Disconnected and
 * any other name count as failures (subvold hung, died or went off the
 * bus).  Prints, one "key value" a line: calls, seconds, calls_per_s,
 * replies, returns (replies that are not errors), unsendable (messages
 * sd-bus refused to build: past its limits), then "error NAME COUNT" for
 * each error name, and "failure ..." for the first failures.  Exits 1 on
 * any failure.
 */
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

#define DEST "org.subvold.Subvold1"
#define ROOT_PATH "/org/subvold/Subvold1"
#define MAX_INFLIGHT 16         /* per connection: under the bus's pending-reply limit */

typedef struct Method {
        char *interface, *name, *signature;  /* in arguments */
} Method;

typedef struct Property {
        char *interface, *name, *type;
} Property;

typedef struct Conn {
        sd_bus *bus;
        unsigned inflight;
} Conn;

typedef struct Count {
        char *name;
        uint64_t n;
} Count;

static Method methods[64];
static size_t n_methods;
static Property properties[128];
static size_t n_properties;
static char *interfaces[16];
static size_t n_interfaces;

static char **objects, **vanished;
static size_t n_objects, n_vanished;

static const char *base_path;
static char **fd_sources;
static size_t n_fd_sources;

static uint64_t calls, replies, returns, unsendable, n_failures;
static Count errors[256];
static size_t n_errors;
static bool sending = true;

static uint64_t rng_state;

/* What the message being built may still take: the bus drops a client
 * whose message is past its max_message_size or max_message_unix_fds
 * (32 MiB and 16 on the system bus), which would say nothing of subvold. */
static size_t budget_bytes;
static unsigned budget_fds;
#define MESSAGE_BYTES (6u << 20)
#define MESSAGE_FDS 8u

static size_t take_bytes(size_t n) {
        if (n > budget_bytes)
                n = budget_bytes;
        budget_bytes -= n;
        return n;
}

static uint64_t rnd(void) {
        /* xorshift64*: reproducible from the seed, good enough to choose. */
        rng_state ^= rng_state >> 12;
        rng_state ^= rng_state << 25;
        rng_state ^= rng_state >> 27;
        return rng_state * 0x2545f4914f6cdd1dULL;
}

static size_t below(size_t n) {
        return n ? (size_t) (rnd() % n) : 0;
}

static bool chance(unsigned percent) {
        return below(100) < percent;
}

static char *xstrdup(const char *s) {
        char *p = strdup(s);
        if (!p)
                abort();
        return p;
}

/* ---- the XML: interfaces, methods with their in signature, properties ---- */

static char *attribute(const char *tag, const char *end, const char *name) {
        char key[32];
        const char *p, *q;

        snprintf(key, sizeof key, " %s=\"", name);
        p = strstr(tag, key);
        if (!p || p > end)
                return NULL;
        p += strlen(key);
        q = strchr(p, '"');
        return q ? strndup(p, (size_t) (q - p)) : NULL;
}

static int load_xml(const char *file) {
        char *text = NULL, *iface = NULL;
        size_t size = 0;
        FILE *f = fopen(file, "re"), *mem;
        Method *open_method = NULL;

        if (!f)
                return -1;
        mem = open_memstream(&text, &size);
        for (int c; (c = fgetc(f)) != EOF;)
                fputc(c, mem);
        fclose(mem);
        fclose(f);
        for (char *p = text; (p = strchr(p, '<'));) {
                char *end;

                if (strncmp(p, "<!--", 4) == 0) {
                        p = strstr(p, "-->");
                        if (!p)
                                break;
                        continue;
                }
                end = strchr(p, '>');
                if (!end)
                        break;
                if (strncmp(p, "<interface ", 11) == 0) {
                        free(iface);
                        iface = attribute(p, end, "name");
                        if (iface && n_interfaces < 16)
                                interfaces[n_interfaces++] = xstrdup(iface);
                } else if (strncmp(p, "<method ", 8) == 0 && iface && n_methods < 64) {
                        open_method = &methods[n_methods++];
                        *open_method = (Method) { xstrdup(iface), attribute(p, end, "name"), xstrdup("") };
                        if (end[-1] == '/')
                                open_method = NULL;
                } else if (strncmp(p, "</method>", 9) == 0) {
                        open_method = NULL;
                } else if (strncmp(p, "<arg ", 5) == 0 && open_method) {
                        char *type = attribute(p, end, "type"), *dir = attribute(p, end, "direction"), *sig;

                        if (type && (!dir || strcmp(dir, "in") == 0)) {
                                if (asprintf(&sig, "%s%s", open_method->signature, type) < 0)
                                        abort();
                                free(open_method->signature);
                                open_method->signature = sig;
                        }
                        free(type);
                        free(dir);
                } else if (strncmp(p, "<property ", 10) == 0 && iface && n_properties < 128) {
                        properties[n_properties++] = (Property) { xstrdup(iface), attribute(p, end, "name"),
                                                                  attribute(p, end, "type") };
                }
                p = end;
        }
        free(iface);
        free(text);
        return n_methods > 0 && n_properties > 0 ? 0 : -1;
}

/* ---- values ---- */

static const char *skip_type(const char *s) {
        int depth = 0;

        do {
                if (*s == 'a') {
                        s++;
                        continue;
                }
                if (*s == '(' || *s == '{')
                        depth++;
                else if (*s == ')' || *s == '}')
                        depth--;
                s++;
        } while (depth > 0 && *s);
        return s;
}

static void random_signature(char *out, size_t room, int depth) {
        static const char basic[] = "ybnqiuxtdsogh";
        size_t k = below(depth > 3 ? 2 : 10);

        if (room < 8) {
                strcpy(out, "y");
                return;
        }
        if (k < 6 || depth > 40) {
                out[0] = basic[below(sizeof basic - 1)];
                out[1] = 0;
        } else if (k < 7) {
                strcpy(out, "v");
        } else if (k < 9) {
                out[0] = 'a';
                if (chance(30)) {
                        out[1] = '{';
                        out[2] = basic[below(sizeof basic - 1)];
                        random_signature(out + 3, room - 5, depth + 1);
                        strcat(out, "}");
                } else
                        random_signature(out + 1, room - 1, depth + 1);
        } else {
                size_t n = 1 + below(3);

                strcpy(out, "(");
                for (size_t i = 0; i < n && strlen(out) + 8 < room; i++)
                        random_signature(out + strlen(out), room - strlen(out) - 2, depth + 1);
                strcat(out, ")");
        }
}

/* A deep or a plain signature, now and then a wrong one in every way. */
static void random_call_signature(char *out, size_t room) {
        if (chance(5)) {
                /* Nesting up to the limits (32 arrays, 32 structs); past
                 * them the bus drops the sender, and subvold sees nothing. */
                size_t n = 20 + below(13), i;
                bool arrays = chance(50);

                for (i = 0; i < n && i + 2 < room / 2; i++)
                        out[i] = arrays ? 'a' : '(';
                out[i++] = 'y';
                if (!arrays)
                        for (size_t j = 0; j < n && i + 1 < room; j++)
                                out[i++] = ')';
                out[i] = 0;
                return;
        }
        out[0] = 0;
        for (size_t n = below(4); n > 0 && strlen(out) + 40 < room; n--)
                random_signature(out + strlen(out), room - strlen(out), 0);
}

static const char *const path_parts[] = { "..", ".", "", "vol", "snap", "nested", "a b", "\xc3\xa9t\xc3\xa9",
                                          "deleted", "x", "\t", "\xe2\x80\xae", "proc", "dev" };

static char *random_path(void) {
        size_t n = below(12), len;
        char *s = NULL;
        FILE *f = open_memstream(&s, &len);

        if (chance(80))
                fputs(base_path, f);
        else if (chance(50))
                fputs("relative", f);
        for (size_t i = 0; i < n; i++)
                fprintf(f, "/%s", path_parts[below(sizeof path_parts / sizeof path_parts[0])]);
        if (chance(3)) {
                /* Long: around PATH_MAX, or far past it. */
                size_t more = take_bytes(chance(50) ? 4000 + below(200) : below(1 << 20));
                for (size_t i = 0; i < more; i++)
                        fputc(i % 64 == 0 ? '/' : 'a' + (int) below(26), f);
        }
        fclose(f);
        return s;
}

static char *random_string(void) {
        size_t n, len;
        char *s = NULL;
        FILE *f;

        switch (below(6)) {
        case 0:
                return xstrdup("");
        case 1:
                return random_path();
        case 2:
                return xstrdup(interfaces[below(n_interfaces)]);
        case 3:
                return xstrdup(properties[below(n_properties)].name);
        default:
                break;
        }
        f = open_memstream(&s, &len);
        n = take_bytes(chance(2) ? below(4 << 20) : below(64));
        for (size_t i = 0; i < n; i++)
                /* ASCII and some multi-byte characters: valid UTF-8, as 's' must be. */
                fputs(chance(90) ? (char[]) { (char) (' ' + below(95)), 0 } : "\xe2\x82\xac", f);
        fclose(f);
        return s;
}

static char *random_object_path(void) {
        char *s;

        switch (below(8)) {
        case 0: case 1: case 2:
                if (n_objects)
                        return xstrdup(objects[below(n_objects)]);
                break;
        case 3:
                if (n_vanished)
                        return xstrdup(vanished[below(n_vanished)]);
                break;
        case 4:
                if (asprintf(&s, ROOT_PATH "/fs/%016llx%016llx", (unsigned long long) rnd(),
                             (unsigned long long) rnd()) < 0)
                        abort();
                return s;
        case 5:
                if (n_objects && asprintf(&s, "%s/%llu", objects[below(n_objects)],
                                          (unsigned long long) (chance(50) ? rnd() : below(300))) >= 0)
                        return s;
                break;
        case 6:
                return xstrdup(chance(50) ? "/" : ROOT_PATH "/fs");
        default:
                break;
        }
        return xstrdup(ROOT_PATH);
}

/* An fd of some kind; -1 if this kind cannot be made now. */
static int random_fd(void) {
        int p[2], fd;

        switch (below(10)) {
        case 0: case 1: case 2:
                return n_fd_sources ? open(fd_sources[below(n_fd_sources)], O_RDONLY | O_CLOEXEC | O_NONBLOCK) : -1;
        case 3:
                return n_fd_sources ? open(fd_sources[below(n_fd_sources)], O_PATH | O_CLOEXEC) : -1;
        case 4:
                if (pipe2(p, O_CLOEXEC) < 0)
                        return -1;
                close(p[1]);
                return p[0];
        case 5:
                if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p) < 0)
                        return -1;
                close(p[1]);
                return p[0];
        case 6:
                fd = memfd_create("busfuzz", MFD_CLOEXEC);
                if (fd >= 0 && write(fd, "x", 1) < 0) {
                        close(fd);
                        return -1;
                }
                return fd;
        case 7:
                return open("/proc/self/status", O_RDONLY | O_CLOEXEC);
        case 8:
                return open("/dev/null", O_RDONLY | O_CLOEXEC);
        default:
                return open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        }
}

static int append_value(sd_bus_message *m, const char **sig, int depth);

static int append_container(sd_bus_message *m, char kind, const char *inner, size_t inner_len, size_t count,
                            int depth) {
        _cleanup_free_ char *contents = strndup(inner, inner_len);
        int r;

        if (!contents)
                abort();
        r = sd_bus_message_open_container(m, kind, contents);
        if (r < 0)
                return r;
        for (size_t i = 0; i < count; i++) {
                const char *s = contents;

                if (kind == 'v') {
                        r = append_value(m, &s, depth + 1);
                } else {
                        while (*s && r >= 0)
                                r = append_value(m, &s, depth + 1);
                }
                if (r < 0)
                        return r;
        }
        return sd_bus_message_close_container(m);
}

static int append_value(sd_bus_message *m, const char **sig, int depth) {
        const char *s = *sig, *end = skip_type(s);
        char type = *s;
        int r = 0;

        *sig = end;
        switch (type) {
        case 'y': { uint8_t v = (uint8_t) rnd(); return sd_bus_message_append_basic(m, type, &v); }
        case 'b': { int v = chance(50); return sd_bus_message_append_basic(m, type, &v); }
        case 'n': case 'q': { uint16_t v = chance(30) ? (chance(50) ? 0 : UINT16_MAX) : (uint16_t) rnd();
                              return sd_bus_message_append_basic(m, type, &v); }
        case 'i': case 'u': { uint32_t v = chance(30) ? (chance(50) ? 0 : UINT32_MAX) : (uint32_t) (chance(50) ? rnd() : below(300));
                              return sd_bus_message_append_basic(m, type, &v); }
        case 'x': case 't': { uint64_t v = chance(30) ? (chance(50) ? 0 : UINT64_MAX) : chance(50) ? rnd() : below(300);
                              return sd_bus_message_append_basic(m, type, &v); }
        case 'd': { double v = chance(20) ? NAN : chance(20) ? INFINITY : (double) rnd() / 3.0;
                    return sd_bus_message_append_basic(m, type, &v); }
        case 's': {
                _cleanup_free_ char *v = random_string();
                return sd_bus_message_append_basic(m, type, v);
        }
        case 'o': {
                _cleanup_free_ char *v = random_object_path();
                return sd_bus_message_append_basic(m, type, v);
        }
        case 'g': {
                char v[256];
                random_signature(v, sizeof v, 0);
                return sd_bus_message_append_basic(m, type, v);
        }
        case 'h': {
                int fd;

                if (budget_fds == 0)
                        return -E2BIG;
                budget_fds--;
                fd = random_fd();
                if (fd < 0)
                        fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
                /* sd-bus sends a copy: ours is closed at once, before the
                 * call even leaves. */
                r = sd_bus_message_append_basic(m, type, &fd);
                close(fd);
                return r;
        }
        case 'v': {
                char inner[256];
                random_signature(inner, sizeof inner, depth);
                return append_container(m, 'v', inner, strlen(inner), 1, depth);
        }
        case 'a': {
                size_t count = chance(60) ? below(4) : below(64);

                if (s[1] == 'y' && chance(50)) {
                        /* Any bytes, invalid UTF-8 and NULs included, up to 4 MiB. */
                        size_t n = take_bytes(chance(5) ? below(4 << 20) : below(300));
                        _cleanup_free_ uint8_t *bytes = malloc(n + 1);
                        if (!bytes)
                                abort();
                        for (size_t i = 0; i < n; i++)
                                bytes[i] = chance(10) ? 0xff : (uint8_t) rnd();
                        if (n > 0 && chance(50))
                                bytes[n - 1] = 0;
                        return sd_bus_message_append_array(m, 'y', bytes, n);
                }
                /* Many of a fixed-size type; few of anything else, and
                 * deep down one, or the message grows past any limit. */
                if (strchr("ybnqiuxtd", s[1]) && chance(10))
                        count = take_bytes(below(100000) * 8) / 8;
                else if (depth > 8 && count > 1)
                        count = 1;
                return append_container(m, 'a', s + 1, (size_t) (end - s - 1), count, depth);
        }
        case '(':
                return append_container(m, 'r', s + 1, (size_t) (end - s - 2), 1, depth);
        case '{':
                return append_container(m, 'e', s + 1, (size_t) (end - s - 2), 1, depth);
        default:
                return -EINVAL;
        }
}

/* ---- the calls ---- */

static void count_error(const char *name) {
        for (size_t i = 0; i < n_errors; i++)
                if (strcmp(errors[i].name, name) == 0) {
                        errors[i].n++;
                        return;
                }
        if (n_errors < 256)
                errors[n_errors++] = (Count) { xstrdup(name), 1 };
}

static bool startswith(const char *s, const char *prefix) {
        return strncmp(s, prefix, strlen(prefix)) == 0;
}

static int on_reply(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        Conn *c = userdata;
        const sd_bus_error *e = sd_bus_message_get_error(m);

        c->inflight--;
        replies++;
        if (!e) {
                returns++;
                return 0;
        }
        count_error(e->name);
        if ((!startswith(e->name, "org.subvold.") && !startswith(e->name, "org.freedesktop.DBus.Error.")) ||
            strcmp(e->name, SD_BUS_ERROR_NO_REPLY) == 0 || strcmp(e->name, SD_BUS_ERROR_SERVICE_UNKNOWN) == 0 ||
            strcmp(e->name, SD_BUS_ERROR_NAME_HAS_NO_OWNER) == 0 || strcmp(e->name, "org.freedesktop.DBus.Error.Disconnected") == 0) {
                if (n_failures++ < 20)  /* a dead subvold fails every call after */
                        printf("failure %s: %s\n", e->name, e->message ?: "");
        }
        return 0;
}

/* One call of one kind, chosen at random; 0 when sent. */
static int send_one(Conn *c) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        _cleanup_free_ char *path = random_object_path();
        const char *interface, *member;
        char signature[512] = "";
        size_t k = below(100);
        int r;

        budget_bytes = MESSAGE_BYTES, budget_fds = MESSAGE_FDS;

        if (k < 40) {
                /* A method of the XML, mostly with its own signature. */
                const Method *meth = &methods[below(n_methods)];
                interface = meth->interface, member = meth->name;
                if (chance(85))
                        snprintf(signature, sizeof signature, "%s", meth->signature);
                else
                        random_call_signature(signature, sizeof signature);
                if (chance(70) && startswith(interface, "org.subvold.Subvold1.Manager")) {
                        free(path);
                        path = xstrdup(ROOT_PATH);
                }
        } else if (k < 65) {
                /* Properties: Get, GetAll, Set, of real and made-up names. */
                const Property *p = &properties[below(n_properties)];
                static const char *const members[] = { "Get", "Get", "Get", "GetAll", "Set" };
                interface = "org.freedesktop.DBus.Properties";
                member = members[below(5)];
                r = sd_bus_message_new_method_call(c->bus, &m, DEST, path, interface, member);
                if (r < 0)
                        return r;
                if (chance(90)) {
                        const char *iface = chance(90) ? p->interface : "org.subvold.Subvold1.Nothing";
                        r = sd_bus_message_append(m, "s", iface);
                        if (r >= 0 && strcmp(member, "GetAll") != 0)
                                r = sd_bus_message_append(m, "s", chance(90) ? p->name : "NoSuchProperty");
                        if (r >= 0 && strcmp(member, "Set") == 0) {
                                char inner[64];
                                const char *t = inner;
                                snprintf(inner, sizeof inner, "%s", chance(50) ? p->type : "s");
                                r = append_container(m, 'v', t, strlen(t), 1, 0);
                        }
                } else {
                        random_call_signature(signature, sizeof signature);
                        for (const char *s = signature; *s && r >= 0;)
                                r = append_value(m, &s, 0);
                }
                goto send;
        } else if (k < 75) {
                /* Names that do not exist, on real and made-up interfaces. */
                interface = chance(50) ? interfaces[below(n_interfaces)] : "org.subvold.Subvold1.NoSuchInterface";
                member = chance(50) ? "NoSuchMethod" : "Get";
                random_call_signature(signature, sizeof signature);
        } else if (k < 85) {
                interface = "org.freedesktop.DBus.Introspectable", member = "Introspect";
                if (chance(10))
                        random_call_signature(signature, sizeof signature);
        } else if (k < 92) {
                interface = "org.freedesktop.DBus.Peer", member = chance(50) ? "Ping" : "GetMachineId";
        } else if (k < 94) {
                interface = "org.freedesktop.DBus.ObjectManager", member = "GetManagedObjects";
        } else {
                /* A whole random call: any member of any interface. */
                interface = interfaces[below(n_interfaces)];
                member = chance(50) ? methods[below(n_methods)].name : properties[below(n_properties)].name;
                random_call_signature(signature, sizeof signature);
        }
        r = sd_bus_message_new_method_call(c->bus, &m, DEST, path, interface, member);
        if (r < 0)
                return r;
        for (const char *s = signature; *s && r >= 0;)
                r = append_value(m, &s, 0);
send:
        if (r < 0) {
                unsendable++;
                return 0;
        }
        r = sd_bus_call_async(c->bus, NULL, m, on_reply, c, 60 * 1000000ULL);
        if (r < 0) {
                /* Too large or too deep for sd-bus to seal: not sent. */
                if (r == -EMSGSIZE || r == -ENOBUFS || r == -EINVAL || r == -E2BIG || r == -ENXIO) {
                        unsendable++;
                        return 0;
                }
                return r;
        }
        c->inflight++;
        calls++;
        return 0;
}

/* ---- the objects, learned as they come and go ---- */

static bool in_list(char **list, size_t n, const char *s) {
        for (size_t i = 0; i < n; i++)
                if (strcmp(list[i], s) == 0)
                        return true;
        return false;
}

static int on_objects(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        char **now = NULL;
        size_t n = 0;
        const char *path;
        int r;

        if (sd_bus_message_is_method_error(m, NULL))
                return on_reply(m, userdata, ret_error);
        ((Conn *) userdata)->inflight--;
        replies++;
        r = sd_bus_message_enter_container(m, 'a', "{oa{sa{sv}}}");
        while (r > 0 && (r = sd_bus_message_enter_container(m, 'e', "oa{sa{sv}}")) > 0) {
                if (sd_bus_message_read(m, "o", &path) < 0 || sd_bus_message_skip(m, "a{sa{sv}}") < 0 ||
                    sd_bus_message_exit_container(m) < 0)
                        break;
                now = realloc(now, (n + 1) * sizeof(char *));
                if (!now)
                        abort();
                now[n++] = xstrdup(path);
        }
        for (size_t i = 0; i < n_objects; i++) {
                if (!in_list(now, n, objects[i]) && !in_list(vanished, n_vanished, objects[i]) && n_vanished < 4096) {
                        vanished = realloc(vanished, (n_vanished + 1) * sizeof(char *));
                        if (!vanished)
                                abort();
                        vanished[n_vanished++] = objects[i];
                } else
                        free(objects[i]);
        }
        free(objects);
        objects = now, n_objects = n;
        return 0;
}

static Conn *conns;
static size_t n_conns;

static int on_learn(sd_event_source *s, uint64_t usec, void *userdata) {
        Conn *c = &conns[0];

        if (sending && sd_bus_call_method_async(c->bus, NULL, DEST, ROOT_PATH, "org.freedesktop.DBus.ObjectManager",
                                                "GetManagedObjects", on_objects, c, NULL) >= 0) {
                c->inflight++;
                calls++;
        }
        return sd_event_source_set_time_relative(s, 500000) < 0 ? -1 : sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
}

static int top_up(sd_event_source *s, void *userdata) {
        bool idle = true;

        for (size_t i = 0; i < n_conns; i++) {
                while (sending && conns[i].inflight < MAX_INFLIGHT)
                        if (send_one(&conns[i]) < 0) {
                                n_failures++;
                                printf("failure sending: %m\n");
                                sending = false;
                        }
                idle = idle && conns[i].inflight == 0;
        }
        if (!sending && idle)
                return sd_event_exit(sd_event_source_get_event(s), 0);
        return 0;
}

static int on_deadline(sd_event_source *s, uint64_t usec, void *userdata) {
        sending = false;
        return 0;
}

static uint64_t now_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000 + (uint64_t) ts.tv_nsec / 1000;
}

int main(int argc, char **argv) {
        sd_event *event = NULL;
        uint64_t start, seconds;
        int r;

        if (argc < 6) {
                fprintf(stderr, "usage: busfuzz XML SECONDS CONNECTIONS SEED BASE_PATH [FILE_OR_DIR...]\n");
                return 2;
        }
        if (load_xml(argv[1]) < 0) {
                fprintf(stderr, "busfuzz: no methods and properties in %s\n", argv[1]);
                return 2;
        }
        seconds = strtoull(argv[2], NULL, 10);
        n_conns = strtoul(argv[3], NULL, 10);
        rng_state = strtoull(argv[4], NULL, 10) * 2654435761u + 1;
        base_path = argv[5];
        fd_sources = argv + 6, n_fd_sources = (size_t) argc - 6;
        conns = calloc(n_conns ?: 1, sizeof(Conn));
        if (!conns || sd_event_default(&event) < 0)
                return 2;
        for (size_t i = 0; i < n_conns; i++) {
                r = sd_bus_open_system(&conns[i].bus);
                if (r >= 0)
                        r = sd_bus_attach_event(conns[i].bus, event, 0);
                if (r < 0) {
                        fprintf(stderr, "busfuzz: cannot connect: %s\n", strerror(-r));
                        return 2;
                }
        }
        if (sd_event_add_post(event, NULL, top_up, NULL) < 0 ||
            sd_event_add_time_relative(event, NULL, CLOCK_MONOTONIC, seconds * 1000000, 0, on_deadline, NULL) < 0 ||
            sd_event_add_time_relative(event, NULL, CLOCK_MONOTONIC, 0, 0, on_learn, NULL) < 0)
                return 2;
        start = now_usec();
        r = sd_event_loop(event);
        double elapsed = (double) (now_usec() - start) / 1e6;

        printf("calls %llu\nseconds %.1f\ncalls_per_s %.0f\nreplies %llu\nreturns %llu\nunsendable %llu\n",
               (unsigned long long) calls, elapsed, (double) calls / elapsed, (unsigned long long) replies,
               (unsigned long long) returns, (unsigned long long) unsendable);
        for (size_t i = 0; i < n_errors; i++)
                printf("error %s %llu\n", errors[i].name, (unsigned long long) errors[i].n);
        if (r < 0) {
                printf("failure event loop: %s\n", strerror(-r));
                n_failures++;
        }
        if (replies != calls) {
                printf("failure %llu call(s) without an answer\n", (unsigned long long) (calls - replies));
                n_failures++;
        }
        printf("failures %llu\n", (unsigned long long) n_failures);
        for (size_t i = 0; i < n_conns; i++)
                sd_bus_flush_close_unref(conns[i].bus);
        sd_event_unref(event);
        return n_failures ? 1 : 0;
}
