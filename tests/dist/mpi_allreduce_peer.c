/* mpi-allreduce-peer: the Open MPI side of tools/bench-collectives-vs-mpi. Times
 * MPI_Allreduce / MPI_Reduce_scatter(_block) / MPI_Allgather(v) over the same sizes, with
 * the same definitions, iteration rule and output format as triad-bench-collectives:
 *   mpirun -n 2 mpi-allreduce-peer [-b 8] [-e 1G] [-f 2] [-w 5] [-i 20]
 *                                  [--op allreduce|reducescatter|allgather] [--json FILE]
 * Blocks follow Triad's split (rank r gets count/n, plus one for the first count%n). */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float value(int rank, uint64_t i) {
  return (float)((i * 7 + (uint64_t)rank * 13 + 1) % 61);
}

static uint64_t parse_bytes(const char* s) {
  char* end = NULL;
  double v = strtod(s, &end);
  if (*end == 'K') v *= 1024.0;
  if (*end == 'M') v *= 1048576.0;
  if (*end == 'G') v *= 1073741824.0;
  return (uint64_t)v;
}

/* Same rule as triad-bench-collectives: at least 2, at most iters, about iters * 32 MiB
 * moved. */
static int iterations_for(uint64_t bytes, int iters) {
  uint64_t budget = (uint64_t)iters * (32u << 20), it = budget / (bytes ? bytes : 1);
  if (it > (uint64_t)iters) it = (uint64_t)iters;
  if (it < 2) it = 2;
  return (int)it;
}

static void block(uint64_t count, int n, int r, uint64_t* off, uint64_t* size) {
  uint64_t base = count / (uint64_t)n, rem = count % (uint64_t)n, ur = (uint64_t)r;
  *size = base + (ur < rem ? 1 : 0);
  *off = ur * base + (ur < rem ? ur : rem);
}

int main(int argc, char** argv) {
  uint64_t min_b = 8, max_b = 1ull << 30;
  int factor = 2, warmup = 5, iters = 20;
  const char* op = "allreduce";
  const char* json = NULL;
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-b"))
      min_b = parse_bytes(argv[i + 1]);
    else if (!strcmp(argv[i], "-e"))
      max_b = parse_bytes(argv[i + 1]);
    else if (!strcmp(argv[i], "-f"))
      factor = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-w"))
      warmup = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-i"))
      iters = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--op"))
      op = argv[i + 1];
    else if (!strcmp(argv[i], "--json"))
      json = argv[i + 1];
    else {
      if (rank == 0) fprintf(stderr, "mpi-allreduce-peer: unknown option %s\n", argv[i]);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  const int ar = !strcmp(op, "allreduce"), rs = !strcmp(op, "reducescatter"),
            ag = !strcmp(op, "allgather");
  if (!ar && !rs && !ag) {
    if (rank == 0)
      fprintf(stderr, "mpi-allreduce-peer: --op %s is not allreduce, reducescatter or allgather\n",
              op);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  if (factor < 2) factor = 2;
  FILE* jf = NULL;
  if (rank == 0 && json) {
    jf = fopen(json, "w");
    if (!jf) MPI_Abort(MPI_COMM_WORLD, 2);
    fprintf(jf, "[\n");
  }
  int* counts = malloc(sizeof(int) * (size_t)n);
  int* displs = malloc(sizeof(int) * (size_t)n);
  if (rank == 0) {
    printf("# %s, %d ranks, Open MPI, float\n", op, n);
    printf("#%11s %13s %9s %7s %6s %10s %8s %8s %7s\n", "size", "count", "type", "redop", "root",
           "time", "algbw", "busbw", "#wrong");
    printf("#%11s %13s %9s %7s %6s %10s %8s %8s %7s\n", "(B)", "(elements)", "", "", "", "(us)",
           "(GB/s)", "(GB/s)", "");
  }
  int first = 1;
  long long bad_total = 0;
  for (uint64_t size = min_b; size <= max_b; size *= (uint64_t)factor) {
    uint64_t total = size / 4, off, mine;
    if (!total) continue;
    block(total, n, rank, &off, &mine);
    for (int k = 0; k < n; ++k) {
      uint64_t o, l;
      block(total, n, k, &o, &l);
      counts[k] = (int)l;
      displs[k] = (int)o;
    }
    const int even = total % (uint64_t)n == 0;
    uint64_t send_n = ar || rs ? total : mine, recv_n = ar || ag ? total : mine;
    float* send = malloc(sizeof(float) * (send_n ? send_n : 1));
    float* recv = malloc(sizeof(float) * (recv_n ? recv_n : 1));
    for (uint64_t i = 0; i < send_n; ++i) send[i] = value(rank, ag ? off + i : i);
    for (uint64_t i = 0; i < recv_n; ++i) recv[i] = -1;
    int it = iterations_for(size, iters);
    double t0 = 0;
    for (int i = -warmup; i < it; ++i) {
      if (i == 0) {
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
      }
      if (ar)
        MPI_Allreduce(send, recv, (int)total, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      else if (rs && even)
        MPI_Reduce_scatter_block(send, recv, (int)mine, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      else if (rs)
        MPI_Reduce_scatter(send, recv, counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      else if (even)
        MPI_Allgather(send, (int)mine, MPI_FLOAT, recv, (int)mine, MPI_FLOAT, MPI_COMM_WORLD);
      else
        MPI_Allgatherv(send, (int)mine, MPI_FLOAT, recv, counts, displs, MPI_FLOAT, MPI_COMM_WORLD);
    }
    double us = (MPI_Wtime() - t0) * 1e6 / it, max_us = 0;
    long long wrong = 0, all_wrong = 0;
    for (uint64_t i = 0; i < recv_n; ++i) {
      uint64_t gi = rs ? off + i : i;
      float want = 0;
      if (ag) {
        int owner = 0;
        for (int k = 0; k < n; ++k)
          if (gi >= (uint64_t)displs[k] && gi < (uint64_t)displs[k] + (uint64_t)counts[k])
            owner = k;
        want = value(owner, gi);
      } else {
        for (int k = 0; k < n; ++k) want += value(k, gi);
      }
      if (recv[i] != want) ++wrong;
    }
    MPI_Reduce(&us, &max_us, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&wrong, &all_wrong, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      double algbw = (double)size / (max_us * 1e3);
      double busbw = algbw * (ar ? 2.0 * (n - 1) / n : (double)(n - 1) / n);
      uint64_t count = ar ? total : total / (uint64_t)n;
      printf(" %11llu %13llu %9s %7s %6d %10.2f %8.2f %8.2f %7lld\n", (unsigned long long)size,
             (unsigned long long)count, "float", ag ? "none" : "sum", -1, max_us, algbw, busbw,
             all_wrong);
      fflush(stdout);
      bad_total += all_wrong;
      if (jf) {
        fprintf(
            jf,
            "%s {\"op\": \"%s\", \"ranks\": %d, \"transport\": \"openmpi\", \"size\": %llu, "
            "\"count\": %llu, "
            "\"time_us\": %.3f, \"algbw\": %.6f, \"busbw\": %.6f, \"wrong\": %lld, \"iters\": %d}",
            first ? "" : ",\n", op, n, (unsigned long long)size, (unsigned long long)count, max_us,
            algbw, busbw, all_wrong, it);
        first = 0;
      }
    }
    free(send);
    free(recv);
  }
  if (rank == 0)
    printf("# Out of bounds values : %lld %s\n#\n", bad_total, bad_total ? "FAILED" : "OK");
  if (jf) {
    fprintf(jf, "\n]\n");
    fclose(jf);
  }
  free(counts);
  free(displs);
  MPI_Finalize();
  return bad_total ? 1 : 0;
}
