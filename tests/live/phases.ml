(* phases.ml — tests/live program: a run whose work changes over time, for
   continuous profiles (segments) and live views. Two domains; each runs
   [hash_phase] (Hashtbl with string keys, String.equal) then [atomic_phase]
   (an Atomic counter shared by both domains), each phase for SECS seconds of
   wall-clock time. The main domain prints its phase changes.
   [run SECS] is the whole program; phases_main.ml runs it as it is (profiled
   from outside), phases_lib.ml under a continuous profile it starts itself
   through the flamme library (Flamme.start ~period). *)

let now () = Unix.gettimeofday ()

let[@inline never] hash_phase until =
  let t = Hashtbl.create 4096 in
  let n = ref 0 in
  while now () < until do
    for i = 1 to 20_000 do
      let k = "key" ^ string_of_int (i land 4095) in
      match Hashtbl.find_opt t k with
      | Some v when String.equal v k -> incr n
      | _ -> Hashtbl.replace t k k
    done
  done;
  !n

let counter = Atomic.make 0

let[@inline never] atomic_phase until =
  while now () < until do
    for _ = 1 to 20_000 do
      Atomic.incr counter
    done
  done;
  Atomic.get counter

let run secs =
  let t0 = now () in
  let work () =
    let a = hash_phase (t0 +. secs) in
    let b = atomic_phase (t0 +. (2. *. secs)) in
    a + b
  in
  let d = Domain.spawn work in
  let r = work () in
  let r = r + Domain.join d in
  Printf.printf "phases: done %d\n%!" (r land 1)
