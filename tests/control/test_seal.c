/* Node secrets sealed at rest (issue 8; docs/api.md, "store_key_file"): the real
 * flyt-cluster-manager against a fake node manager, the store read directly.
 * usage: test_seal PATH/flyt-cluster-manager sqlite|STORE_URL
 *   - after a registration the nodes row holds neither secret the node manager was given,
 *     only "sealed1:" values; sessions work (token verifies, manager token accepted)
 *   - a row an older version left in plain text is sealed at the next start and still works
 *   - a key file other than the store's, or one others may read, refuses the start
 *   - PostgreSQL without store_key_file refuses the start, naming the option */
#include "check.h"
#include "clm_harness.h"
#include "flyt_log.h"
#include "flyt_token.h"
#include "store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static struct clm_proc clm;
static struct fake_nm nm;
/* the heartbeat thread reads this array for as long as it runs: not a function's local
 * (test_legacy_plain_row's was, and the thread then read a dead stack slot, which
 * expect_refused's buffers overwrite: a segfault in the PostgreSQL run, now and then) */
static struct fake_nm *heartbeating[] = {&nm};
static char vm_token[65], key_file[700];

/* The node's two stored secret columns, as the store holds them. */
static void stored_secrets(char *session_key, char *manager_token, size_t len)
{
    char err[512];
    struct store *st = store_open(clm.store, err, sizeof err);
    CHECK_NE(st, NULL, "open the store: %s", err);
    struct db_rows r;
    struct db_arg a[] = {DB_S(nm.node_id)};
    CHECK_GE(db_exec(store_db_(st), "SELECT session_key, manager_token FROM nodes WHERE id = ?",
                     a, 1, &r, err, sizeof err), 0, "read the nodes row: %s", err);
    CHECK_EQ(r.nrows, 1, "the node's row");
    snprintf(session_key, len, "%s", db_cell(&r, 0, 0));
    snprintf(manager_token, len, "%s", db_cell(&r, 0, 1));
    db_rows_free(&r);
    store_close(st);
}

static void expect_sealed(const char *when)
{
    char sk[512], mt[512];
    stored_secrets(sk, mt, sizeof sk);
    CHECK(strncmp(sk, "sealed1:", 8) == 0 && strncmp(mt, "sealed1:", 8) == 0,
          "%s: both columns sealed (session_key \"%.20s...\", manager_token \"%.20s...\")",
          when, sk, mt);
    CHECK(!strstr(sk, nm.session_key) && !strstr(mt, nm.session_key)
              && !strstr(sk, nm.manager_token) && !strstr(mt, nm.manager_token),
          "%s: no secret the node manager was given is in the row", when);
    CHECK(strcmp(sk, mt) != 0, "%s: the two columns differ", when);
}

/* A session on the node: its token verifies with the node's session key and the node
 * manager accepted the manager token; then released. */
static void expect_session_works(const char *when)
{
    json_t *a;
    long st = call(&clm, "POST", "/v1/sessions", vm_token, "{\"pid\": 77, \"process\": \"t\"}", &a);
    CHECK_EQ(st, 201, "%s: a session: %ld %s", when, st, call_err);
    const char *sid = jstr(a, "session.id");
    unsigned char key[32];
    size_t kl = 0;
    char err[256], path[128];
    CHECK_EQ(flyt_hex_decode(nm.session_key, key, sizeof key, &kl), 0, "the node's key");
    CHECK_EQ(flyt_session_token_verify(key, kl, jstr(a, "token"), sid, (long long)time(NULL), err,
                                       sizeof err), 0,
             "%s: the session token verifies with the node's session_key (%s)", when, err);
    CHECK(fake_nm_has(&nm, sid), "%s: the node manager started the server", when);
    CHECK_EQ(nm.bad_auth, 0, "%s: the node manager got the right manager token", when);
    snprintf(path, sizeof path, "/v1/sessions/%s", sid);
    CHECK_EQ(call(&clm, "DELETE", path, vm_token, NULL, NULL), 204, "%s: released", when);
    json_decref(a);
}

/* The daemon on conf must exit at start saying want (and want2 if given). */
static void expect_refused(const char *conf, const char *want, const char *want2)
{
    char cmd[3000], out[16384];
    snprintf(cmd, sizeof cmd, "timeout 20 %s --config %s 2>&1; echo \"exit $?\"", clm.binary, conf);
    FILE *p = popen(cmd, "r");
    CHECK_NE(p, NULL, "run %s", cmd);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    pclose(p);
    CHECK(strstr(out, want) && (!want2 || strstr(out, want2)) && !strstr(out, "exit 0\n")
              && !strstr(out, "exit 124\n"),
          "refused at start with \"%s\": %s", want, out);
    printf("  refused: %s", strstr(out, want) ? strstr(out, want) : out);
}

static void write_key(const char *hex, mode_t mode)
{
    FILE *f = fopen(key_file, "w");
    CHECK_NE(f, NULL, "write %s", key_file);
    fprintf(f, "%s\n", hex);
    fclose(f);
    chmod(key_file, mode);
}

static void read_key(char *hex, size_t len)
{
    FILE *f = fopen(key_file, "r");
    CHECK_NE(f, NULL, "read %s", key_file);
    CHECK_NE(fgets(hex, (int)len, f), NULL, "read %s", key_file);
    fclose(f);
    hex[strcspn(hex, "\n")] = 0;
}

static void test_sealed_at_registration(void)
{
    printf("-- a registration's secrets are sealed in the store\n");
    struct stat sb;
    CHECK_EQ(stat(key_file, &sb), 0, "the key file %s exists", key_file);
    CHECK_EQ(sb.st_mode & 0777, 0600, "the key file is 0600");
    expect_sealed("after registration");
    expect_session_works("sealed");
}

static void test_legacy_plain_row(void)
{
    printf("-- a row left in plain text is sealed at the next start and still works\n");
    heartbeats_stop();   /* a heartbeat rewrites the row: only the start may seal it here */
    clm_stop(&clm);
    char err[512];
    struct store *st = store_open(clm.store, err, sizeof err);
    CHECK_NE(st, NULL, "open the store: %s", err);
    struct db_arg a[] = {DB_S(nm.session_key), DB_S(nm.manager_token), DB_S(nm.node_id)};
    CHECK_EQ(db_exec(store_db_(st), "UPDATE nodes SET session_key = ?, manager_token = ?"
                     " WHERE id = ?", a, 3, NULL, err, sizeof err), 1, "plain row: %s", err);
    store_close(st);
    char sk[512], mt[512];
    stored_secrets(sk, mt, sizeof sk);
    CHECK_STR_EQ(sk, nm.session_key, "the row is plain before the start");
    clm_restart(&clm);
    expect_sealed("after a start on a plain row");
    heartbeats_start(&clm, heartbeating, 1, 250);
    expect_session_works("after sealing a plain row");
}

static void test_wrong_key_and_mode(void)
{
    printf("-- another key file, or one others may read, refuses the start\n");
    char conf[600], good[128], other[65];
    snprintf(conf, sizeof conf, "%s/clm.conf", clm.dir);
    clm_stop(&clm);
    read_key(good, sizeof good);
    CHECK_EQ(flyt_random_hex(32, other, sizeof other), 0, "another key");
    write_key(other, 0600);
    expect_refused(conf, "store_key_file does not match the key the store was sealed with", NULL);
    write_key(good, 0644);
    expect_refused(conf, "is open to other users", "chmod 600");
    chmod(key_file, 0600);
    clm_restart(&clm);
    expect_session_works("with the right key again");
}

static void test_postgresql_needs_key_file(void)
{
    printf("-- PostgreSQL without store_key_file refuses the start\n");
    char conf[600];
    snprintf(conf, sizeof conf, "%s/nokey.conf", clm.dir);
    FILE *f = fopen(conf, "w");
    CHECK_NE(f, NULL, "write %s", conf);
    fprintf(f, "listen = 127.0.0.1:0\nstore = \"%s\"\noperator_token_file = operator.token\n",
            clm.store);
    fclose(f);
    expect_refused(conf, "store_key_file: required with a PostgreSQL store", NULL);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test_seal PATH/flyt-cluster-manager sqlite|STORE_URL\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    flyt_log_init("test_seal", FLYT_LOG_ERROR);
    srand((unsigned)time(NULL) ^ (unsigned)getpid());
    char sqlite_path[600];
    const char *store = argv[2];
    int sqlite = strcmp(store, "sqlite") == 0;
    if (sqlite) {
        snprintf(sqlite_path, sizeof sqlite_path, "sqlite:/tmp/flyt-test-seal-%d.db", (int)getpid());
        store = sqlite_path;
    }
    printf("store: %s\n", store);
    fake_nm_start(&nm, "node-s");
    clm_start(&clm, argv[1], store, "heartbeat_interval = 1s\nnode_timeout = 5s\n");
    /* SQLite: the default beside the store; PostgreSQL: the harness's store_key_file */
    snprintf(key_file, sizeof key_file, sqlite ? "%s.key" : "%s/store.key",
             sqlite ? store + 7 : clm.dir);
    clm_create_vm(&clm, "{\"id\": \"vm-s\", \"vm_ip\": \"10.0.5.2\", \"host_ip\": \"10.0.5.1\", "
                        "\"compute_units\": 16, \"memory\": \"1GiB\"}", vm_token);
    clm_create_node(&clm, &nm, "10.0.5.1");
    json_decref(clm_register_node(&clm, &nm, "10.0.5.1", 64, 8LL << 30, NULL));
    heartbeats_start(&clm, heartbeating, 1, 250);

    test_sealed_at_registration();
    test_legacy_plain_row();
    test_wrong_key_and_mode();
    if (!sqlite)
        test_postgresql_needs_key_file();

    heartbeats_stop();
    clm_stop(&clm);
    fake_nm_stop(&nm);
    if (sqlite) {
        static const char *const suffixes[] = {"", "-wal", "-shm", ".key"};
        for (int i = 0; i < 4; i++) {
            char p[700];
            snprintf(p, sizeof p, "%s%s", store + 7, suffixes[i]);
            unlink(p);
        }
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", clm.dir);
    if (system(cmd) != 0) {
    }
    printf("test_seal: all passed\n");
    return 0;
}
