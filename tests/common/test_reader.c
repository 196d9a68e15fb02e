/* flyt_reader, the one buffered socket reader, over a socket pair:
 * pipelined frames in one recv, bulk reads past the buffer, offsets, a
 * descriptor passed with the bytes and where it ends, room for reading
 * ahead, the end of the stream. */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "flyt_reader.h"
#include "flyt_transport.h"

#define CHUNK 1024

static int pair[2];

static void send_bytes(const void *p, size_t n)
{
    CHECK_EQ(flyt_write_full(pair[1], p, n), 0, "sent %zu bytes", n);
}

static void test_pipelined(flyt_reader *r)
{
    char frames[30], got[10];
    for (int i = 0; i < 30; i++)
        frames[i] = (char)i;
    send_bytes(frames, sizeof frames);
    CHECK_EQ(flyt_reader_read(r, got, sizeof got), 0, "the first of three frames read");
    CHECK_MEM_EQ(got, frames, sizeof got, "with its bytes");
    CHECK_EQ(flyt_reader_buffered(r), 20, "the other two came with the same recv");
    CHECK_EQ(flyt_reader_offset(r), 10, "the next byte is at offset 10");
    CHECK_EQ(*flyt_reader_at(r, 20), 20, "a buffered byte is found by its offset");
    CHECK_EQ(flyt_reader_skip(r, 10), 0, "the second frame skipped");
    CHECK_EQ(flyt_reader_read(r, got, sizeof got), 0, "the third read");
    CHECK_MEM_EQ(got, frames + 20, sizeof got, "with its bytes");
}

static void test_bulk(flyt_reader *r)
{
    static char big[CHUNK], got[CHUNK];
    memset(big, 'b', sizeof big);
    send_bytes(big, sizeof big);
    CHECK_EQ(flyt_reader_read(r, got, sizeof got), 0, "a bulk read with nothing buffered");
    CHECK_MEM_EQ(got, big, sizeof got, "went straight to its destination");
    CHECK_EQ(flyt_reader_buffered(r), 0, "leaving nothing buffered");
    CHECK_EQ(r->total, 30 + CHUNK, "counted in the total");
}

static void test_passed_fd(flyt_reader *r)
{
    int p[2];
    CHECK_EQ(pipe(p), 0, "a pipe to pass");
    char a[8] = "withfd!", b[8] = "plain!!", got[8];
    struct iovec iov = {a, sizeof a};
    CHECK_EQ(flyt_writev_full_fd(pair[1], &iov, 1, p[0]), 0, "8 bytes sent with a descriptor");
    send_bytes(b, sizeof b);
    uint64_t start = r->total;
    CHECK_EQ(flyt_reader_read(r, got, sizeof got), 0, "they are read");
    CHECK_GE(r->passed_fd, 0, "the descriptor came with them");
    CHECK_EQ(r->fd_end, start + 8, "and ends where its bytes end");
    CHECK_EQ(flyt_reader_read(r, got, sizeof got), 0, "the plain bytes after it read");
    CHECK_EQ(r->fd_end, start + 8, "the descriptor's end stays");
    close(r->passed_fd);
    r->passed_fd = -1;
    close(p[0]);
    close(p[1]);
}

static void test_room(flyt_reader *r)
{
    char bytes[100], got[40];
    memset(bytes, 'r', sizeof bytes);
    send_bytes(bytes, sizeof bytes);
    CHECK_EQ(flyt_reader_read(r, got, sizeof got), 0, "40 of 100 bytes read");
    CHECK_EQ(flyt_reader_make_room(r, CHUNK, 4 * CHUNK), 0, "room for a chunk more");
    CHECK_GE(r->cap - r->len, CHUNK, "there is");
    CHECK_EQ(r->cap, 2 * CHUNK, "the buffer doubled");
    CHECK_EQ(flyt_reader_buffered(r), 60, "the unread bytes kept");
    CHECK_EQ(flyt_reader_make_room(r, 4 * CHUNK, 4 * CHUNK), -1, "no room past the limit");
    send_bytes(bytes, 10);
    CHECK_EQ(flyt_reader_fill(r), 10, "reading ahead appends");
    CHECK_EQ(flyt_reader_buffered(r), 70, "after the unread bytes");
    CHECK_EQ(flyt_reader_skip(r, 70), 0, "all of it consumed");
}

static void test_end(flyt_reader *r)
{
    char got[4];
    send_bytes("ab", 2);
    close(pair[1]);
    errno = EINVAL;
    CHECK_EQ(flyt_reader_read(r, got, sizeof got), -1, "a read past the end of the stream fails");
    CHECK_EQ(errno, 0, "with errno 0 (the end, not an error)");
}

int main(void)
{
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0, "a socket pair");
    flyt_reader r;
    CHECK_EQ(flyt_reader_init(&r, pair[0], CHUNK, 1), 0, "a reader that takes descriptors");
    test_pipelined(&r);
    test_bulk(&r);
    test_passed_fd(&r);
    test_room(&r);
    test_end(&r);
    flyt_reader_free(&r);
    close(pair[0]);
    return check_done();
}
