(* tests/engine/gcloop.ml — Gc.major in a loop on several domains while
   other domains come and go: the runtime calls its major-slice hooks back to
   back (hundreds of thousands of empty slices a second while a cycle waits
   for the slowest domain), the case where a profiler's GC hooks show up in
   the profile. A live tree keeps each cycle busy for a while.
   Usage: gcloop.exe [SCALE]  (SCALE multiplies the rounds; default 1) *)

let scale = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 1.0
let scaled n = max 1 (int_of_float (scale *. float_of_int n))

type tree = Leaf | Node of tree * int * tree

let rec build d = if d = 0 then Leaf else Node (build (d - 1), d, build (d - 1))
let rec sum = function Leaf -> 0 | Node (l, v, r) -> sum l + v + sum r

let stop = Atomic.make false

(* Loops Gc.major, keeping a tree of its own alive so marking has work. *)
let[@inline never] major_looper seed =
  let keep = build 15 in
  let n = ref 0 in
  while not (Atomic.get stop) do
    Gc.major ();
    incr n
  done;
  !n + sum keep + seed

(* A short-lived domain: allocates a tree and sums it. *)
let[@inline never] churner i = sum (build (12 + (i land 1)))

let () =
  let loopers = List.init 2 (fun i -> Domain.spawn (fun () -> major_looper i)) in
  let total = ref 0 in
  for r = 1 to scaled 150 do
    let ds = List.init 2 (fun i -> Domain.spawn (fun () -> churner (r + i))) in
    List.iter (fun d -> total := !total + Domain.join d) ds
  done;
  Atomic.set stop true;
  let majors = List.fold_left (fun a d -> a + Domain.join d) 0 loopers in
  Printf.printf "gcloop: checksum %d, %d\n" (!total land 0xffff) (majors land 0xff)
