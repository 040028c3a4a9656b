(* tests/fidelity/joinalloc.ml — the main domain blocks in Domain.join while
   another domain allocates heavily, so domain 0's share of every
   stop-the-world minor collection is done by its backup thread. Checked by
   test_fidelity.py: samples labelled "backup (domain 0)" exist and stacks reach their
   thread's root.
   Usage: joinalloc.exe [SCALE]  (SCALE multiplies the amount of work; default 1) *)

let scale = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 1.0
let scaled n = max 1 (int_of_float (scale *. float_of_int n))

(* Short-lived lists and a rolling window of survivors: minor collections
   with promotion, and major work. *)
let[@inline never] churn_heap () =
  let keep = Array.make 4096 [] in
  let n = ref 0 in
  for _ = 1 to scaled 140 do
    for i = 0 to 9_999 do
      let l = List.init 20 (fun j -> i + j) in
      keep.((!n + i) land 4095) <- l
    done;
    incr n
  done;
  !n

let () =
  let d = Domain.spawn churn_heap in
  let rounds = Domain.join d in
  Printf.printf "joinalloc: %d rounds, %d minor GCs, cpu %.3f\n" rounds
    (Gc.quick_stat ()).Gc.minor_collections (Sys.time ())
