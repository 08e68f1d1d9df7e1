/* ab_quant.c: the one-off A/B behind cpu_gemv.md: cf_cpu_qgemm_isa of an older commit (renamed old_) against
 * the current one for n = 1 (decode), MLX affine 4 or 8 bits, group 64, bf16 scales and biases; "hot": one
 * 256x2048 matrix called 200 times (stays in L2: the compute rate), "cold": weight copies swept beyond the
 * last-level cache. Timed and split as ab_dense.c. Build (repository root, after a Release build):
 *   git show 190bb8d:src/backend/cpu/cpu_quant.c > /tmp/old_quant.c
 *   gcc -O3 -Isrc -Iinclude -Dcf_cpu_qgemm_isa=old_cf_cpu_qgemm_isa -Dcf_cpu_qgemm=old_cf_cpu_qgemm -c /tmp/old_quant.c -o /tmp/old_quant.o
 *   gcc -O3 -fopenmp -Isrc -Iinclude bench/results/cpu_gemv/ab_quant.c /tmp/old_quant.o build/libcinfer.a -lm -o /tmp/ab_quant
 *   /tmp/ab_quant THREADS ROUNDS BITS [ISA] [N] */
#include "backend/cpu/cpu_quant.h"
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
int old_cf_cpu_qgemm_isa(cf_cpu_isa_level isa, const float *x, int64_t xs, int64_t n, const cf_qmat *w, int64_t r0, int64_t r1, float *out, int64_t os);
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
static int cmpd(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
typedef int (*qfn)(cf_cpu_isa_level, const float *, int64_t, int64_t, const cf_qmat *, int64_t, int64_t, float *, int64_t);
static double cpu_now(void){struct timespec t;clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t);return t.tv_sec+1e-9*t.tv_nsec;}
static double tcpu[64];
static double call(qfn f,int isa,const float*x,int64_t n,const cf_qmat*w,float*o,int nt){
 const int64_t d=w->rows,blocks=(d+15)/16;
 #pragma omp parallel num_threads(nt)
 { int64_t t=omp_get_thread_num(),T=omp_get_num_threads(); int64_t j0=blocks*t/T*16,j1=blocks*(t+1)/T*16; if(j1>d)j1=d;
   double c0=cpu_now();
   if(j1>j0) f((cf_cpu_isa_level)isa,x,w->cols,n,w,j0,j1,o+j0,d);
   tcpu[t]=cpu_now()-c0; }
 double m=0; for(int t=0;t<nt;t++) if(tcpu[t]>m)m=tcpu[t]; return m;
}
int main(int argc,char**argv){
 int nt=atoi(argv[1]), rounds=atoi(argv[2]); int bits=atoi(argv[3]); int isa=argc>4?atoi(argv[4]):2; int n=argc>5?atoi(argv[5]):1;
 const int G=64; int64_t shapes[][2]={{256,2048},{8192,2048},{2048,8192}}; int ns=3;
 size_t total=(size_t)1<<30; uint8_t*q=malloc(total); for(size_t i=0;i<total;i++)q[i]=(uint8_t)(i*2654435761u>>13);
 uint16_t*sb=malloc(total/8); for(size_t i=0;i<total/16;i++)sb[i]=0x3c00+(i%5);
 float*x=malloc(4*8192*8),*o=malloc(4*(size_t)8192*8); for(int i=0;i<8192*8;i++)x[i]=1.0f/(i+1);
 qfn f[2]={old_cf_cpu_qgemm_isa,cf_cpu_qgemm_isa};
 static double t[3][2][256];
 for(int r=0;r<rounds;r++) for(int s=0;s<ns;s++) for(int vv=0;vv<2;vv++){ int v=(r&1)?1-vv:vv;
   int64_t d=shapes[s][0],k=shapes[s][1]; size_t qb=(size_t)d*k*bits/8, sbn=(size_t)d*(k/G);
   int copies = s==0 ? 1 : (int)(total/2/qb); if(copies>8)copies=8; int reps = s==0 ? 200 : copies;
   double tc=0;
   for(int c=0;c<reps;c++){ int cc=c%copies; cf_qmat w={.q=(const uint32_t*)(q+(size_t)cc*qb),.scales=sb+(size_t)cc*2*sbn,.biases=sb+(size_t)cc*2*sbn+sbn,.sb_dtype=CF_BF16,.bits=bits,.group=G,.rows=d,.cols=k};
     tc+=call(f[v],isa,x,n,&w,o,nt);} t[s][v][r]=tc/reps; }
 for(int s=0;s<ns;s++){ printf("q%d %6lldx%-5lld %s",bits,(long long)shapes[s][0],(long long)shapes[s][1],s==0?"hot ":"cold");
   for(int v=0;v<2;v++){ qsort(t[s][v],rounds,sizeof(double),cmpd); double b=(double)shapes[s][0]*shapes[s][1]*bits/8+(double)shapes[s][0]*shapes[s][1]/G*4;
     printf("  %s %5.1f GB/s (best %5.1f)",v?"new":"old",b/t[s][v][rounds/2]/1e9,b/t[s][v][0]/1e9);} printf("\n"); }
}
