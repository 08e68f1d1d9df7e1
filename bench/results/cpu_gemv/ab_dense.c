/* ab_dense.c: the one-off A/B behind cpu_gemv.md: the bf16 matmul kernels of an older commit (compiled with
 * their public names prefixed old_) against the current ones, out = x . w^T for n activation rows, weights
 * split between threads by whole 16-row blocks as cpu_dense_matmul does. Each sample sweeps up to 64 weight
 * copies (beyond the last-level cache) and is timed by each thread's own CPU time (CLOCK_THREAD_CPUTIME_ID,
 * the slowest thread's), so a thread descheduled by other work on this shared machine does not count; old
 * and new alternate, the order flipped every round; medians. Build (repository root, after a Release build):
 *   git show 190bb8d:src/backend/cpu/cpu_kernels.c > /tmp/old_kernels.c
 *   gcc -O3 -Isrc -Iinclude -Dcf_cpu_gemm_kernel_isa=old_cf_cpu_gemm_kernel_isa -Dcf_cpu_isa_available=old_cf_cpu_isa_available \
 *       -Dcf_cpu_gemm_kernel=old_cf_cpu_gemm_kernel -Dcf_cpu_best_isa=old_cf_cpu_best_isa -Dcf_cpu_isa=old_cf_cpu_isa \
 *       -c /tmp/old_kernels.c -o /tmp/old_kernels.o
 *   gcc -O3 -fopenmp -Isrc -Iinclude bench/results/cpu_gemv/ab_dense.c /tmp/old_kernels.o build/libcinfer.a -lm -o /tmp/ab_dense
 *   /tmp/ab_dense THREADS ROUNDS [ISA 0|1|2 = C|AVX2|AVX-512] [N] */
#include "backend/cpu/cpu_kernels.h"
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
cf_gemm_fn old_cf_cpu_gemm_kernel_isa(cf_dtype wdt, cf_cpu_isa_level isa);
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
static int cmpd(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
static double cpu_now(void){struct timespec t;clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t);return t.tv_sec+1e-9*t.tv_nsec;}
static double tcpu[64];
/* returns the largest per-thread CPU time of the kernel calls (robust to descheduling) */
static double call(cf_gemm_fn g,const float*x,int64_t n,const char*w,int64_t d,int64_t k,float*o,int nt){
 const int64_t blocks=(d+15)/16;
 #pragma omp parallel num_threads(nt)
 { int64_t t=omp_get_thread_num(),T=omp_get_num_threads(); int64_t j0=blocks*t/T*16,j1=blocks*(t+1)/T*16; if(j1>d)j1=d;
   double c0=cpu_now();
   if(j1>j0) g(x,k,n,w+(size_t)j0*k*2,k,j1-j0,k,o+j0,d);
   tcpu[t]=cpu_now()-c0; }
 double m=0; for(int t=0;t<nt;t++) if(tcpu[t]>m)m=tcpu[t]; return m;
}
int main(int argc,char**argv){
 int nt=atoi(argv[1]), rounds=atoi(argv[2]); int isa=argc>3?atoi(argv[3]):2; int n=argc>4?atoi(argv[4]):1;
 int64_t shapes[][2]={{2048,2048},{512,2048},{8192,2048},{2048,8192},{128256,2048},{262144,2048},{4096,4096},{14336,4096},{4096,14336}};
 int ns=5; size_t total=(size_t)1<<30;
 char*w=aligned_alloc(4096,total); for(size_t i=0;i<total/2;i++)((uint16_t*)w)[i]=0x3f80+(i%7);
 float*x=aligned_alloc(64,4*8192*8),*o=malloc(4*(size_t)128256*8); for(int i=0;i<8192*8;i++)x[i]=1.0f/(i+1);
 cf_gemm_fn g[2]={old_cf_cpu_gemm_kernel_isa(CF_BF16,isa),cf_cpu_gemm_kernel_isa(CF_BF16,isa)};
 static double t[9][2][256];
 for(int r=0;r<rounds;r++) for(int s=0;s<ns;s++) for(int vv=0;vv<2;vv++){ int v=(r&1)?1-vv:vv;
   int64_t d=shapes[s][0],k=shapes[s][1]; size_t mb=(size_t)d*k*2; int copies=(int)(total/mb); if(copies>64)copies=64; if(copies<1)copies=1;
   /* each sample: sweep `copies` different copies (beyond the LLC) */
   double tc=0; for(int c=0;c<copies;c++) tc+=call(g[v],x,n,w+(size_t)c*mb,d,k,o,nt); t[s][v][r]=tc/copies; }
 /* Llama-3.2-1B decode step: 16 x (q, k, v, o, gate, up, down) + lm_head, from the per-shape medians */
 { const double cnt[9]={32,32,32,16,1,0,0,0,0}; double st[2]={0,0};
   for(int v=0;v<2;v++) for(int s=0;s<ns;s++) if(cnt[s]>0){ double tmp[256]; memcpy(tmp,t[s][v],sizeof(double)*rounds); qsort(tmp,rounds,sizeof(double),cmpd); st[v]+=cnt[s]*tmp[rounds/2]; }
   printf("model step (matmuls only, per-thread CPU time): old %.1f tok/s  new %.1f tok/s  (%.2fx)\n",1/st[0],1/st[1],st[0]/st[1]); }
 for(int s=0;s<ns;s++){ printf("%6lldx%-5lld",(long long)shapes[s][0],(long long)shapes[s][1]);
   for(int v=0;v<2;v++){ qsort(t[s][v],rounds,sizeof(double),cmpd); double b=(double)shapes[s][0]*shapes[s][1]*2;
     printf("  %s %5.1f GB/s (best %5.1f)",v?"new":"old",b/t[s][v][rounds/2]/1e9,b/t[s][v][0]/1e9);} printf("\n"); }
}
