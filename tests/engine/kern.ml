(* tests/engine/kern.ml — a program that spends a known share of its CPU
   time in the kernel, on behalf of known functions, in three phases of
   about the same CPU time each:
   - compute: arithmetic only (user space);
   - touch:   a heap that keeps growing: fresh 40 MB strings (malloc'd, so
              mmap'd, then munmap'd by the GC), one byte written per 4 KiB
              page: nearly all of it is the kernel's page faults, entered
              by touch itself;
   - files:   Sys.file_exists in a loop: stat(2) system calls, entered by
              libc under caml_sys_file_exists.
   Usage: kern.exe [CENTISECONDS per phase]  (default 40). Prints each
   phase's CPU time and system time (this thread's clocks: the agent's
   writer thread is not in them). *)

external thread_cputime : unit -> float = "fid_thread_cputime"
external thread_systime : unit -> float = "eng_thread_systime"

let phase_cpu =
  (if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 40.) /. 100.

let sink = ref 0

(* Each phase runs until it has used phase_cpu seconds of CPU, reading the
   clock (a system call: this clock has no vDSO path) in its own loop, so
   that all of its time is under its own function. *)
let[@inline never] compute () =
  let c0 = thread_cputime () in
  while thread_cputime () -. c0 < phase_cpu do
    let acc = ref !sink in
    for j = 1 to 200_000 do
      acc := (!acc * 31) lxor (j lsr 3)
    done;
    sink := !sink + !acc
  done

let page = 4096
let chunk = 40 lsl 20

let[@inline never] touch () =
  let c0 = thread_cputime () in
  while thread_cputime () -. c0 < phase_cpu do
    let b = Bytes.create chunk in
    let i = ref 0 in
    while !i < chunk do
      Bytes.unsafe_set b !i 'x';
      i := !i + page
    done;
    sink := !sink + Char.code (Bytes.unsafe_get b (chunk - page))
  done

let[@inline never] files () =
  let c0 = thread_cputime () in
  while thread_cputime () -. c0 < phase_cpu do
    for _ = 1 to 100 do
      if Sys.file_exists "/proc/self/status" then incr sink
    done
  done

(* Prints the CPU and system time phase f used. *)
let phase name f =
  let c0 = thread_cputime () and s0 = thread_systime () in
  f ();
  let c = thread_cputime () -. c0 and s = thread_systime () -. s0 in
  Printf.printf "kern: phase %s cpu %.3f sys %.3f\n" name c s

let () =
  phase "compute" compute;
  phase "touch" touch;
  phase "files" files;
  Printf.printf "kern: checksum %d\n" (!sink land 0xff)
