/* test_timeline: events land on their tracks, the JSON is well formed whatever the names
 * hold, and two threads record on their own tracks concurrently. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pipecompress/pc_error.h"
#include "pipecompress/pc_timeline.h"

static void test_json(void **state)
{
    (void)state;
    pc_timeline_t *tl;
    assert_int_equal(pc_timeline_create(3, 1000, &tl), PC_OK);
    assert_int_equal(pc_timeline_track(tl, "backprop"), 0);
    assert_int_equal(pc_timeline_track(tl, "compressor"), 1);
    pc_timeline_event(tl, 0, "forward fc1", 2000, 5000);
    pc_timeline_event(tl, 1, "odd \"name\"\\", 3000, 3500);
    pc_timeline_event(tl, 7, "no such track", 0, 1); /* ignored */
    size_t len;
    char *j = pc_timeline_json(tl, &len);
    assert_non_null(j);
    assert_int_equal(strlen(j), len);
    assert_non_null(strstr(
        j,
        "\"name\": \"thread_name\", \"pid\": 3, \"tid\": 0, \"args\": {\"name\": \"backprop\"}"));
    assert_non_null(strstr(
        j, "\"name\": \"forward fc1\", \"pid\": 3, \"tid\": 0, \"ts\": 1.000, \"dur\": 3.000"));
    assert_non_null(strstr(j, "\"name\": \"odd _name__\""));
    assert_null(strstr(j, "no such track"));
    free(j);
    assert_int_equal(pc_timeline_dropped(tl), 0);
    pc_timeline_destroy(tl);
}

typedef struct arg {
    pc_timeline_t *tl;
    int track;
} arg_t;

static void *writer(void *p)
{
    arg_t *a = p;
    for (int i = 0; i < 100000; i++)
        pc_timeline_event(a->tl, a->track, "e", i, i + 1);
    return NULL;
}

static void test_two_writers(void **state)
{
    (void)state;
    pc_timeline_t *tl;
    assert_int_equal(pc_timeline_create(0, 0, &tl), PC_OK);
    pc_timeline_track(tl, "a");
    pc_timeline_track(tl, "b");
    arg_t a = {tl, 0}, b = {tl, 1};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, writer, &a);
    pthread_create(&tb, NULL, writer, &b);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    size_t len;
    char *j = pc_timeline_json(tl, &len);
    /* Count by hand: sanitizers' strstr re-measures the whole haystack on every call. */
    size_t events = 0;
    const char *pat = "\"ph\": \"X\"";
    size_t plen = strlen(pat);
    for (size_t i = 0; i + plen <= len; i++)
        if (j[i] == '"' && memcmp(j + i, pat, plen) == 0)
            events++;
    assert_int_equal(events, 200000);
    free(j);
    pc_timeline_destroy(tl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_two_writers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
