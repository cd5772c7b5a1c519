/*
 * The C ABI of tollgate, from C: admit, throttle with retry_after, anonymous keys, weighted
 * cost, bad arguments, profile errors, reload, error messages, and admits from several threads during a
 * reload. Built and run by tests/ffi_c.rs (linked dynamically and statically) and, under
 * valgrind, by tests/c/valgrind.sh.
 *
 * Prints one line per failed check and a closing "tollgate_test: N passed, M failed" line;
 * exits 0 only if nothing failed.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tollgate.h"

static int passed, failed;

#define CHECK(cond)                                                                          \
    do {                                                                                     \
        if (cond) {                                                                          \
            passed++;                                                                        \
        } else {                                                                             \
            failed++;                                                                        \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);         \
        }                                                                                    \
    } while (0)

#define CHECK_RESULT(call, want)                                                             \
    do {                                                                                     \
        tg_result got_ = (call);                                                             \
        if (got_ == (want)) {                                                                \
            passed++;                                                                        \
        } else {                                                                             \
            failed++;                                                                        \
            fprintf(stderr, "%s:%d: %s returned %u, expected %u (%s)\n", __FILE__, __LINE__,  \
                    #call, (unsigned)got_, (unsigned)(want), #want);                         \
        }                                                                                    \
    } while (0)

#define S(lit) lit, (sizeof(lit) - 1)

static const char PROFILE[] =
    "name: c-test\n"
    "identities: { capacity: 1024 }\n"
    "route_classes:\n"
    "  write:\n"
    "    burst:     { tokens: 2,   per: 1s }\n"
    "    sustained: { tokens: 100, per: 1h }\n"
    "  read:\n"
    "    burst:     { tokens: 1000000, per: 1s }\n"
    "    sustained: { tokens: 1000000, per: 1s }\n"
    "catalog:\n"
    "  throttled: { code: slow_down }\n";

/* The same classes and capacity, another throttle code and a larger write burst. */
static const char PROFILE_RELOADED[] =
    "name: c-test\n"
    "identities: { capacity: 1024 }\n"
    "route_classes:\n"
    "  write:\n"
    "    burst:     { tokens: 5,   per: 1s }\n"
    "    sustained: { tokens: 100, per: 1h }\n"
    "  read:\n"
    "    burst:     { tokens: 1000000, per: 1s }\n"
    "    sustained: { tokens: 1000000, per: 1s }\n"
    "catalog:\n"
    "  throttled: { code: try_later }\n";

/* Drops the read class: a reload must refuse it. */
static const char PROFILE_FEWER_CLASSES[] =
    "name: c-test\n"
    "identities: { capacity: 1024 }\n"
    "route_classes:\n"
    "  write:\n"
    "    burst:     { tokens: 2,   per: 1s }\n"
    "    sustained: { tokens: 100, per: 1h }\n";

/* A decision that no call makes, to see that failures write nothing. */
static tg_decision sentinel(void) {
    tg_decision d;
    memset(&d, 0, sizeof d);
    d.kind = TG_DECISION_KIND_UNAVAILABLE;
    d.http_status = 1;
    d.retry_after_ms = 7;
    d.code = "sentinel";
    return d;
}

static int is_sentinel(const tg_decision *d) {
    return d->kind == TG_DECISION_KIND_UNAVAILABLE && d->http_status == 1 &&
           d->retry_after_ms == 7 && strcmp(d->code, "sentinel") == 0;
}

static void test_admit_and_throttle(tg_limiter *l, uint32_t write) {
    tg_decision d;
    for (int i = 0; i < 2; i++) {
        CHECK_RESULT(tg_admit(l, S("acme"), S("alice"), write, &d), TG_RESULT_OK);
        CHECK(d.kind == TG_DECISION_KIND_ADMIT);
        CHECK(d.http_status == 200);
        CHECK(d.retry_after_ms == TG_RETRY_AFTER_NONE);
        CHECK(d.code != NULL && d.code[0] == '\0');
    }
    CHECK_RESULT(tg_admit(l, S("acme"), S("alice"), write, &d), TG_RESULT_OK);
    CHECK(d.kind == TG_DECISION_KIND_THROTTLE);
    CHECK(d.http_status == 429);
    CHECK(d.bucket == TG_BUCKET_KIND_BURST);
    CHECK(d.cause == TG_CAUSE_NONE);
    /* Burst 2 per second: the next token is at most 500 ms away, and never 0 when throttled. */
    CHECK(d.retry_after_ms >= 1 && d.retry_after_ms <= 500);
    CHECK(strcmp(d.code, "slow_down") == 0);
    /* Another principal has its own buckets. */
    CHECK_RESULT(tg_admit(l, S("acme"), S("bob"), write, &d), TG_RESULT_OK);
    CHECK(d.kind == TG_DECISION_KIND_ADMIT);
}

static void test_anonymous(tg_limiter *l, uint32_t write) {
    const uint8_t v4[4] = {192, 0, 2, 1};
    const uint8_t neighbour[4] = {192, 0, 2, 99};
    const uint8_t mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 7};
    const uint8_t v6[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    tg_decision d;
    CHECK_RESULT(tg_admit_anonymous(l, v4, 4, write, &d), TG_RESULT_OK);
    CHECK(d.kind == TG_DECISION_KIND_ADMIT);
    CHECK_RESULT(tg_admit_anonymous(l, mapped, 16, write, &d), TG_RESULT_OK);
    CHECK(d.kind == TG_DECISION_KIND_ADMIT);
    /* Same /24, so the same bucket: the third request of the network is throttled. */
    CHECK_RESULT(tg_admit_anonymous(l, neighbour, 4, write, &d), TG_RESULT_OK);
    CHECK(d.kind == TG_DECISION_KIND_THROTTLE && d.http_status == 429);
    CHECK_RESULT(tg_admit_anonymous(l, v6, 16, write, &d), TG_RESULT_OK);
    CHECK(d.kind == TG_DECISION_KIND_ADMIT);

    tg_decision s = sentinel();
    CHECK_RESULT(tg_admit_anonymous(l, v4, 5, write, &s), TG_RESULT_INVALID_IP_LENGTH);
    CHECK_RESULT(tg_admit_anonymous(l, v4, 0, write, &s), TG_RESULT_INVALID_IP_LENGTH);
    CHECK_RESULT(tg_admit_anonymous(l, NULL, 4, write, &s), TG_RESULT_NULL_ARGUMENT);
    CHECK_RESULT(tg_admit_anonymous(NULL, v4, 4, write, &s), TG_RESULT_NULL_ARGUMENT);
    CHECK_RESULT(tg_admit_anonymous(l, v4, 4, 99, &s), TG_RESULT_UNKNOWN_ROUTE_CLASS);
    CHECK(is_sentinel(&s));
}

/* Weighted cost: n tokens at once, n = 0 checks, a cost above the burst of 2 is refused apart. */
static void test_weighted(tg_limiter *l, uint32_t write) {
    const uint8_t v4[4] = {198, 51, 100, 1};
    tg_decision d;
    CHECK_RESULT(tg_admit_n(l, S("acme"), S("carol"), write, 3, &d), TG_RESULT_OK);
    CHECK(d.kind == TG_DECISION_KIND_EXCEEDS && d.http_status == 429);
    CHECK(d.bucket == TG_BUCKET_KIND_BURST && d.cause == TG_CAUSE_NONE);
    CHECK(d.retry_after_ms == TG_RETRY_AFTER_NONE);
    CHECK(strcmp(d.code, "cost_exceeds_limit") == 0);
    CHECK_RESULT(tg_admit_n(l, S("acme"), S("carol"), write, 0, &d), TG_RESULT_OK);
    CHECK(d.kind == TG_DECISION_KIND_ADMIT);
    /* Nothing was charged so far: both tokens are there, and go in one request. */
    CHECK_RESULT(tg_admit_n(l, S("acme"), S("carol"), write, 2, &d), TG_RESULT_OK);
    CHECK(d.kind == TG_DECISION_KIND_ADMIT);
    CHECK_RESULT(tg_admit_n(l, S("acme"), S("carol"), write, 0, &d), TG_RESULT_OK);
    CHECK(d.kind == TG_DECISION_KIND_THROTTLE && d.retry_after_ms >= 1 && d.retry_after_ms <= 500);
    CHECK_RESULT(tg_admit_anonymous_n(l, v4, 4, write, 2, &d), TG_RESULT_OK);
    CHECK(d.kind == TG_DECISION_KIND_ADMIT);
    CHECK_RESULT(tg_admit_anonymous_n(l, v4, 4, write, 1, &d), TG_RESULT_OK);
    CHECK(d.kind == TG_DECISION_KIND_THROTTLE);

    tg_decision s = sentinel();
    CHECK_RESULT(tg_admit_n(NULL, S("acme"), S("carol"), write, 1, &s), TG_RESULT_NULL_ARGUMENT);
    CHECK_RESULT(tg_admit_n(l, NULL, 4, S("carol"), write, 1, &s), TG_RESULT_NULL_ARGUMENT);
    CHECK_RESULT(tg_admit_n(l, S("acme"), S("carol"), 99, 1, &s), TG_RESULT_UNKNOWN_ROUTE_CLASS);
    CHECK_RESULT(tg_admit_n(l, S("acme"), S("carol"), write, 1, NULL), TG_RESULT_NULL_ARGUMENT);
    CHECK_RESULT(tg_admit_anonymous_n(l, v4, 3, write, 1, &s), TG_RESULT_INVALID_IP_LENGTH);
    CHECK(is_sentinel(&s));
}

static void test_bad_arguments(tg_limiter *l, uint32_t write) {
    tg_decision s = sentinel();
    char long_id[TG_MAX_ID_LEN + 1];
    memset(long_id, 'x', sizeof long_id);

    CHECK_RESULT(tg_admit(NULL, S("acme"), S("alice"), write, &s), TG_RESULT_NULL_ARGUMENT);
    CHECK_RESULT(tg_admit(l, NULL, 0, S("alice"), write, &s), TG_RESULT_NULL_ARGUMENT);
    CHECK_RESULT(tg_admit(l, S("acme"), NULL, 0, write, &s), TG_RESULT_NULL_ARGUMENT);
    CHECK_RESULT(tg_admit(l, "", 0, S("alice"), write, &s), TG_RESULT_EMPTY_KEY);
    CHECK_RESULT(tg_admit(l, S("acme"), "", 0, write, &s), TG_RESULT_EMPTY_KEY);
    CHECK_RESULT(tg_admit(l, long_id, sizeof long_id, S("alice"), write, &s),
                 TG_RESULT_KEY_TOO_LONG);
    CHECK_RESULT(tg_admit(l, S("ac\xff"), S("alice"), write, &s), TG_RESULT_INVALID_UTF8);
    CHECK_RESULT(tg_admit(l, S("acme"), S("alice"), 2, &s), TG_RESULT_UNKNOWN_ROUTE_CLASS);
    CHECK_RESULT(tg_admit(l, S("acme"), S("alice"), UINT32_MAX, &s),
                 TG_RESULT_UNKNOWN_ROUTE_CLASS);
    /* A length past PTRDIFF_MAX is refused before anything is read. */
    CHECK_RESULT(tg_admit(l, "a", SIZE_MAX, S("alice"), write, &s), TG_RESULT_LENGTH_OVERFLOW);
    CHECK(is_sentinel(&s));
    /* NULL out: refused before anything is charged. */
    CHECK_RESULT(tg_admit(l, S("carol"), S("carol"), write, NULL), TG_RESULT_NULL_ARGUMENT);

    uint32_t class_ = 12345;
    CHECK_RESULT(tg_route_class(l, S("nope"), &class_), TG_RESULT_UNKNOWN_ROUTE_CLASS);
    CHECK_RESULT(tg_route_class(l, NULL, 0, &class_), TG_RESULT_NULL_ARGUMENT);
    CHECK_RESULT(tg_route_class(NULL, S("write"), &class_), TG_RESULT_NULL_ARGUMENT);
    CHECK_RESULT(tg_route_class(l, S("write"), NULL), TG_RESULT_NULL_ARGUMENT);
    CHECK(class_ == 12345);

    tg_limiter *none = NULL;
    CHECK_RESULT(tg_limiter_new_from_yaml(NULL, 0, &none), TG_RESULT_NULL_ARGUMENT);
    CHECK_RESULT(tg_limiter_new_from_yaml(S(PROFILE), NULL), TG_RESULT_NULL_ARGUMENT);
    CHECK(none == NULL);
    tg_limiter_free(NULL);
}

static void test_profile_errors(void) {
    static const char bad[] = "name: bad\n"
                              "identities: { capacity: 1024 }\n"
                              "route_classes:\n"
                              "  write:\n"
                              "    burst:     { tokens: 2,   per: 1 fortnight }\n"
                              "    sustained: { tokens: 100, per: 1h }\n";
    tg_limiter *l = NULL;
    tg_profile_error err;
    memset(&err, 0, sizeof err);
    CHECK_RESULT(tg_limiter_new_from_yaml(S(bad), &l), TG_RESULT_INVALID_PROFILE);
    CHECK_RESULT(tg_limiter_new_from_yaml_err(S(bad), &err, &l), TG_RESULT_INVALID_PROFILE);
    CHECK(l == NULL);
    CHECK(err.line == 5);
    CHECK(err.column > 0);
    CHECK(strstr(err.message, "route_classes.write.burst.per") != NULL);
    CHECK(err.message_len == strlen(err.message));
    printf("profile error at line %u column %u: %s\n", err.line, err.column, err.message);
}

static void test_error_messages(void) {
    static const tg_result all[] = {
        TG_RESULT_OK,           TG_RESULT_NULL_ARGUMENT,       TG_RESULT_LENGTH_OVERFLOW,
        TG_RESULT_INVALID_UTF8, TG_RESULT_EMPTY_KEY,           TG_RESULT_KEY_TOO_LONG,
        TG_RESULT_INVALID_IP_LENGTH, TG_RESULT_BUFFER_TOO_SMALL, TG_RESULT_UNKNOWN_ROUTE_CLASS,
        TG_RESULT_INVALID_PROFILE, TG_RESULT_RELOAD_REFUSED,   TG_RESULT_OUT_OF_MEMORY,
        TG_RESULT_PANIC,
    };
    char buf[TG_ERROR_MESSAGE_CAPACITY];
    size_t n = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        CHECK_RESULT(tg_error_message(all[i], buf, sizeof buf, &n), TG_RESULT_OK);
        CHECK(n > 0 && n == strlen(buf));
    }
    CHECK_RESULT(tg_error_message(424242, buf, sizeof buf, &n), TG_RESULT_OK);
    CHECK(strcmp(buf, "unknown tollgate result code") == 0);
    char tiny[4] = {'x', 'x', 'x', 'x'};
    size_t m = 99;
    CHECK_RESULT(tg_error_message(TG_RESULT_NULL_ARGUMENT, tiny, sizeof tiny, &m),
                 TG_RESULT_BUFFER_TOO_SMALL);
    CHECK(m == 99 && tiny[0] == 'x' && tiny[3] == 'x');
    CHECK_RESULT(tg_error_message(TG_RESULT_OK, NULL, 10, &m), TG_RESULT_NULL_ARGUMENT);
    CHECK_RESULT(tg_error_message(TG_RESULT_OK, buf, sizeof buf, NULL), TG_RESULT_NULL_ARGUMENT);
}

static void test_reload(tg_limiter *l, uint32_t write) {
    tg_decision before, d;
    tg_profile_error err;
    memset(&err, 0, sizeof err);

    /* A code pointer from before the reload, to read after it. */
    CHECK_RESULT(tg_admit(l, S("reload"), S("r"), write, &before), TG_RESULT_OK);
    CHECK_RESULT(tg_admit(l, S("reload"), S("r"), write, &before), TG_RESULT_OK);
    CHECK_RESULT(tg_admit(l, S("reload"), S("r"), write, &before), TG_RESULT_OK);
    CHECK(before.kind == TG_DECISION_KIND_THROTTLE && strcmp(before.code, "slow_down") == 0);

    CHECK_RESULT(tg_limiter_reload(l, S("name: [")), TG_RESULT_INVALID_PROFILE);
    CHECK_RESULT(tg_limiter_reload_err(l, S("name: ["), &err), TG_RESULT_INVALID_PROFILE);
    CHECK(err.line >= 1 && err.message[0] != '\0');
    CHECK_RESULT(tg_limiter_reload(NULL, S(PROFILE)), TG_RESULT_NULL_ARGUMENT);
    CHECK_RESULT(tg_limiter_reload(l, NULL, 0), TG_RESULT_NULL_ARGUMENT);

    memset(&err, 0, sizeof err);
    CHECK_RESULT(tg_limiter_reload_err(l, S(PROFILE_FEWER_CLASSES), &err),
                 TG_RESULT_RELOAD_REFUSED);
    CHECK(err.message[0] != '\0');
    printf("reload refused: %s\n", err.message);
    /* Refused: the old profile is in force, both classes still there. */
    uint32_t read = 0;
    CHECK_RESULT(tg_route_class(l, S("read"), &read), TG_RESULT_OK);
    CHECK_RESULT(tg_admit(l, S("acme"), S("alice"), read, &d), TG_RESULT_OK);

    memset(&err, 0, sizeof err);
    CHECK_RESULT(tg_limiter_reload_err(l, S(PROFILE_RELOADED), &err), TG_RESULT_OK);
    if (err.message[0] != '\0') {
        fprintf(stderr, "reload failed: %s\n", err.message);
    }
    /* State is kept as tokens owed: "reload/r" owes the 2 it took, so 3 of the new 5 are left
     * (one more for every 200 ms that passed), then it refills at the new rate (a token per
     * 200 ms). A fresh caller gets the new burst of 5. */
    int left = 0;
    for (int i = 0; i < 10; i++) {
        CHECK_RESULT(tg_admit(l, S("reload"), S("r"), write, &d), TG_RESULT_OK);
        if (d.kind != TG_DECISION_KIND_ADMIT) {
            break;
        }
        left++;
    }
    CHECK(left >= 3 && left < 10);
    CHECK(d.kind == TG_DECISION_KIND_THROTTLE);
    CHECK(d.retry_after_ms >= 1 && d.retry_after_ms <= 200);
    int admitted = 0;
    for (int i = 0; i < 6; i++) {
        CHECK_RESULT(tg_admit(l, S("reload"), S("fresh"), write, &d), TG_RESULT_OK);
        admitted += d.kind == TG_DECISION_KIND_ADMIT;
    }
    CHECK(admitted == 5);
    CHECK(d.kind == TG_DECISION_KIND_THROTTLE);
    CHECK(strcmp(d.code, "try_later") == 0);
    /* The earlier code string is still valid (interned until tg_limiter_free). */
    CHECK(strcmp(before.code, "slow_down") == 0);
}

struct worker {
    tg_limiter *limiter;
    uint32_t class_;
    int id;
    int errors;
};

static void *admit_loop(void *arg) {
    struct worker *w = arg;
    char principal[32];
    for (int i = 0; i < 2000; i++) {
        int n = snprintf(principal, sizeof principal, "p-%d-%d", w->id, i % 50);
        tg_decision d;
        if (tg_admit(w->limiter, S("threads"), principal, (size_t)n, w->class_, &d) !=
                TG_RESULT_OK ||
            d.code == NULL) {
            w->errors++;
        }
    }
    return NULL;
}

static void test_threads(tg_limiter *l, uint32_t read) {
    pthread_t threads[4];
    struct worker workers[4];
    for (int i = 0; i < 4; i++) {
        workers[i] = (struct worker){l, read, i, 0};
        CHECK(pthread_create(&threads[i], NULL, admit_loop, &workers[i]) == 0);
    }
    /* Reloads while the workers admit. */
    for (int i = 0; i < 20; i++) {
        if (i % 2) {
            CHECK_RESULT(tg_limiter_reload(l, S(PROFILE)), TG_RESULT_OK);
        } else {
            CHECK_RESULT(tg_limiter_reload(l, S(PROFILE_RELOADED)), TG_RESULT_OK);
        }
    }
    for (int i = 0; i < 4; i++) {
        CHECK(pthread_join(threads[i], NULL) == 0);
        CHECK(workers[i].errors == 0);
    }
}

/* A pinned caller (under valgrind: the pin is freed, and a pin of another limiter is refused). */
static void test_pinned(tg_limiter *l, uint32_t write) {
    tg_pinned *p = NULL;
    tg_decision d;
    CHECK_RESULT(tg_pin(l, S("acme"), S("erin"), write, &p), TG_RESULT_OK);
    CHECK(p != NULL);
    for (int i = 0; i < 2; i++) {
        CHECK_RESULT(tg_admit_pinned(l, p, &d), TG_RESULT_OK);
        CHECK(d.kind == TG_DECISION_KIND_ADMIT);
    }
    CHECK_RESULT(tg_admit_pinned(l, p, &d), TG_RESULT_OK);
    CHECK(d.kind == TG_DECISION_KIND_THROTTLE && strcmp(d.code, "slow_down") == 0);
    /* The key and the pin share erin's buckets. */
    CHECK_RESULT(tg_admit(l, S("acme"), S("erin"), write, &d), TG_RESULT_OK);
    CHECK(d.kind == TG_DECISION_KIND_THROTTLE);

    tg_limiter *other = NULL;
    CHECK_RESULT(tg_limiter_new_from_yaml(S(PROFILE), &other), TG_RESULT_OK);
    tg_decision s = sentinel();
    CHECK_RESULT(tg_admit_pinned(other, p, &s), TG_RESULT_FOREIGN_PIN);
    CHECK_RESULT(tg_admit_pinned(l, NULL, &s), TG_RESULT_NULL_ARGUMENT);
    CHECK(is_sentinel(&s));
    tg_pinned *none = NULL;
    CHECK_RESULT(tg_pin(l, S(""), S("erin"), write, &none), TG_RESULT_EMPTY_KEY);
    CHECK(none == NULL);
    tg_limiter_free(other);
    tg_pinned_free(p);
    tg_pinned_free(NULL);
}

int main(void) {
    printf("tollgate %s\n", tg_version());
    tg_limiter *l = NULL;
    CHECK_RESULT(tg_limiter_new_from_yaml(S(PROFILE), &l), TG_RESULT_OK);
    if (l == NULL) {
        fprintf(stderr, "no limiter: cannot go on\n");
        return 1;
    }
    uint32_t write = 99, read = 99;
    CHECK_RESULT(tg_route_class(l, S("write"), &write), TG_RESULT_OK);
    CHECK_RESULT(tg_route_class(l, S("read"), &read), TG_RESULT_OK);
    CHECK(write == 0 && read == 1);

    test_admit_and_throttle(l, write);
    test_anonymous(l, write);
    test_pinned(l, write);
    test_weighted(l, write);
    test_bad_arguments(l, write);
    test_profile_errors();
    test_error_messages();
    test_reload(l, write);
    test_threads(l, read);

    tg_limiter_free(l);
    printf("tollgate_test: %d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
